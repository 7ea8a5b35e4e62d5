#include "binding/pending_call.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>
#include <utility>

#include "pool/caller_polling.hpp"

namespace isohost::binding {

void PendingCall::complete(worker::Outcome outcome, std::uint64_t output_read) {
  std::lock_guard lock(mutex_);
  answers_.clear();
  outcome_.emplace(std::move(outcome));
  output_read_ = output_read;
  completed_flag_.store(true, std::memory_order_release);
  signal_event_locked();
  completed_.notify_all();
}

void PendingCall::ask(nlohmann::ordered_json body, Answer answer) {
  std::lock_guard lock(mutex_);
  if (outcome_) return;
  const auto token = next_token_++;
  answers_.emplace(token, std::move(answer));
  asks_.push_back(Ask{token, std::move(body)});
  asked_flag_.store(true, std::memory_order_release);
  signal_event_locked();
  completed_.notify_all();
}

std::vector<PendingCall::Ask> PendingCall::take_asks() {
  std::lock_guard lock(mutex_);
  asked_flag_.store(false, std::memory_order_relaxed);
  return std::exchange(asks_, {});
}

void PendingCall::answer(std::uint64_t token, nlohmann::ordered_json reply) {
  // Under the lock, so that complete() (after which the pool may be gone) cannot run between
  // finding the answer and handing it to the pool.
  std::lock_guard lock(mutex_);
  const auto it = answers_.find(token);
  if (it == answers_.end()) return;
  auto answer = std::move(it->second);
  answers_.erase(it);
  answer(std::move(reply));
}

PendingCall::Event PendingCall::wait_event(std::chrono::milliseconds limit,
                                           std::chrono::microseconds poll_window) {
  pool::poll_for(poll_window, [this] {
    return completed_flag_.load(std::memory_order_acquire) ||
           asked_flag_.load(std::memory_order_acquire);
  });
  std::unique_lock lock(mutex_);
  completed_.wait_for(lock, limit, [this] { return outcome_.has_value() || !asks_.empty(); });
  if (!asks_.empty()) return Event::asks;
  return outcome_ ? Event::done : Event::timeout;
}

const worker::Outcome& PendingCall::wait() {
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [this] { return outcome_.has_value(); });
  return *outcome_;
}

bool PendingCall::done() const {
  std::lock_guard lock(mutex_);
  return outcome_.has_value();
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

std::uint64_t PendingCall::output_read() const {
  std::lock_guard lock(mutex_);
  return output_read_;
}

}  // namespace isohost::binding
