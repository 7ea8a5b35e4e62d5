#include "binding/pending_call.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

#include "pool/caller_polling.hpp"

namespace isohost::binding {

void PendingCall::complete(worker::Outcome outcome) {
  std::lock_guard lock(mutex_);
  outcome_.emplace(std::move(outcome));
  completed_flag_.store(true, std::memory_order_release);
  signal_event_locked();
  completed_.notify_all();
}

const worker::Outcome& PendingCall::wait() {
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [this] { return outcome_.has_value(); });
  return *outcome_;
}

bool PendingCall::wait_for(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return completed_.wait_for(lock, limit, [this] { return outcome_.has_value(); });
}

bool PendingCall::done() const {
  std::lock_guard lock(mutex_);
  return outcome_.has_value();
}

bool PendingCall::poll(std::chrono::microseconds window) const {
  return pool::poll_for(window, [this] { return completed_flag_.load(std::memory_order_acquire); });
}

int PendingCall::event_fd() {
  std::lock_guard lock(mutex_);
  if (!event_) {
    event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!event_) throw std::system_error(errno, std::generic_category(), "eventfd");
    if (outcome_) signal_event_locked();
  }
  return event_.get();
}

void PendingCall::signal_event_locked() {
  if (!event_) return;
  const std::uint64_t one = 1;
  // A full counter is still readable, which is all a waiter needs.
  [[maybe_unused]] const auto written = ::write(event_.get(), &one, sizeof one);
}

}  // namespace isohost::binding
