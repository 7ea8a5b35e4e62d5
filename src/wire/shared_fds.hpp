#pragma once

// Descriptors that travel with one message through copyable holders (a pool Request, an
// Outcome, the std::function handlers that carry them between threads).
//
//   SharedFds fds(std::move(frame.buffers));
//   auto copy = fds;                         // shares the same descriptors
//   std::vector<UniqueFd> mine = copy.take();  // one owner now; every holder is empty
//
// Whoever takes them owns them; descriptors nobody takes close with the last holder.
// Thread safety: hand a holder from one thread to another (a future, a post), never use one
// from two threads at once.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "wire/unique_fd.hpp"

namespace isohost::wire {

class SharedFds {
 public:
  SharedFds() = default;
  explicit SharedFds(std::vector<UniqueFd> fds)
      : fds_(fds.empty() ? nullptr : std::make_shared<std::vector<UniqueFd>>(std::move(fds))) {}

  // The descriptors, leaving every holder empty.
  [[nodiscard]] std::vector<UniqueFd> take() const {
    if (!fds_) return {};
    return std::exchange(*fds_, {});
  }

  // Closes the descriptors now, for every holder.
  void close() const {
    if (fds_) fds_->clear();
  }

  [[nodiscard]] std::size_t size() const { return fds_ ? fds_->size() : 0; }

 private:
  std::shared_ptr<std::vector<UniqueFd>> fds_;
};

}  // namespace isohost::wire
