#include "binding/output_queue.hpp"

#include <utility>

namespace isohost::binding {

void OutputQueue::push(worker::OutputLine line) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    // Counted under the lock: a batch's `through` then covers exactly what it and the drops
    // before it hold.
    pushed_.fetch_add(1, std::memory_order_release);
    const std::size_t cost = line.text.size() + line.env.size() + kLineOverhead;
    if (queued_bytes_ + cost > kMaxQueuedBytes) {
      ++dropped_;
      return;
    }
    queued_bytes_ += cost;
    queued_.push_back(std::move(line));
  }
  arrived_.notify_one();
}

std::optional<OutputQueue::Batch> OutputQueue::take(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  arrived_.wait_for(lock, limit, [this] { return closed_ || !queued_.empty() || dropped_ > 0; });
  if (closed_ && queued_.empty() && dropped_ == 0) return std::nullopt;
  Batch batch{.lines = std::exchange(queued_, {}),
              .dropped = std::exchange(dropped_, 0),
              .through = pushed_.load(std::memory_order_relaxed)};
  queued_bytes_ = 0;
  return batch;
}

void OutputQueue::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  arrived_.notify_all();
}

}  // namespace isohost::binding
