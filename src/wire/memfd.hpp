#pragma once

// memfd-backed buffers: anonymous memory with a descriptor, passed between processes with
// SCM_RIGHTS. Nothing appears in /dev/shm or on disk, so nothing outlives both holders.

#include <cstddef>
#include <span>
#include <string>

#include "wire/unique_fd.hpp"

namespace isohost::wire {

// Creates a close-on-exec memfd of `size` bytes, sealed against shrinking so that a receiver's
// mapping can never fault on a truncated file. Throws std::system_error.
UniqueFd create_memfd(const std::string& name, std::size_t size);

// A memfd's size (fstat). Throws std::system_error.
std::size_t memfd_size(int fd);

// A shared mapping of a whole memfd, unmapped on destruction.
class MappedBuffer {
 public:
  enum class Access { read_only, read_write };

  // Maps the whole of `fd`. A zero-size memfd maps to an empty span. Throws std::system_error.
  static MappedBuffer map(int fd, Access access);

  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  ~MappedBuffer();

  [[nodiscard]] std::span<std::byte> bytes() const { return {data_, size_}; }

 private:
  MappedBuffer(std::byte* data, std::size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace isohost::wire
