#include "wire/memfd.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace isohost::wire {

UniqueFd create_memfd(const std::string& name, std::size_t size) {
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw std::system_error(errno, std::generic_category(), "memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    throw std::system_error(errno, std::generic_category(), "ftruncate memfd");
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    throw std::system_error(errno, std::generic_category(), "seal memfd");
  }
  return fd;
}

std::size_t memfd_size(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::system_error(errno, std::generic_category(), "fstat");
  return static_cast<std::size_t>(st.st_size);
}

MappedBuffer MappedBuffer::map(int fd, Access access) {
  const std::size_t size = memfd_size(fd);
  if (size == 0) return MappedBuffer(nullptr, 0);
  const int prot = access == Access::read_write ? PROT_READ | PROT_WRITE : PROT_READ;
  void* data = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap memfd");
  return MappedBuffer(static_cast<std::byte*>(data), size);
}

MappedBuffer::MappedBuffer(MappedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedBuffer::~MappedBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace isohost::wire
