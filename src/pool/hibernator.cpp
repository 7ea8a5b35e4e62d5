#include "pool/hibernator.hpp"

#include <asio/post.hpp>

#include <fmt/format.h>
#include <optional>

#include "proc/cuda_checkpoint.hpp"

namespace isohost::pool {
namespace {

using Clock = std::chrono::steady_clock;
using proc::CudaProcessState;
using proc::CudaResult;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

DriverOutcome outcome(DriverOutcome::Kind kind, std::string message) {
  return DriverOutcome{.kind = kind, .message = std::move(message)};
}

std::string call_failed(const char* call, pid_t pid, const CudaResult& r) {
  return fmt::format("{}({}) failed: {}", call, pid, r.name);
}

// After a step the driver must say the process is in `expected`; else why not (it may be FAILED).
std::optional<std::string> state_is_not(const proc::CudaCheckpoint& driver, pid_t pid,
                                        CudaProcessState expected, const char* step) {
  CudaProcessState state{};
  const auto r = driver.state(pid, state);
  if (!r.ok()) return call_failed("cuCheckpointProcessGetState", pid, r);
  if (state == expected) return std::nullopt;
  return fmt::format("after the {} pid {} is {}, not {}", step, pid,
                     proc::cuda_process_state_name(state), proc::cuda_process_state_name(expected));
}

}  // namespace

Hibernator::Hibernator(asio::io_context& io, HibernatorOptions options)
    : io_(io), options_(std::move(options)) {}

Hibernator::~Hibernator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  wakeup_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Hibernator::hibernate(pid_t pid, Done done) { enqueue(true, pid, std::move(done)); }

void Hibernator::wake(pid_t pid, Done done) { enqueue(false, pid, std::move(done)); }

void Hibernator::enqueue(bool hibernate, pid_t pid, Done done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(Job{hibernate, pid, std::move(done), asio::make_work_guard(io_)});
  }
  // Started at the first job: a host that never hibernates keeps no thread for it.
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wakeup_.notify_one();
}

void Hibernator::run() {
  for (;;) {
    std::optional<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wakeup_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job.emplace(std::move(jobs_.front()));
      jobs_.pop_front();
    }
    const auto start = Clock::now();
    auto result = carry_out(*job);
    result.seconds = ms_since(start) / 1000.0;
    asio::post(io_, [done = std::move(job->done), result = std::move(result),
                     work = std::move(job->work)]() mutable {
      done(std::move(result));
      work.reset();
    });
  }
}

DriverOutcome Hibernator::carry_out(const Job& job) {
  if (!opened_) {
    opened_ = true;
    auto opened = proc::CudaCheckpoint::open(options_.library);
    driver_ = std::move(opened.driver);
    unavailable_ = std::move(opened.failure);
  }
  if (!driver_) return outcome(DriverOutcome::Kind::unavailable, unavailable_);
  return job.hibernate ? do_hibernate(job.pid) : do_wake(job.pid);
}

DriverOutcome Hibernator::do_hibernate(pid_t pid) {
  CudaProcessState state{};
  if (auto r = driver_->state(pid, state); !r.ok()) {
    return outcome(
        DriverOutcome::Kind::unavailable,
        fmt::format("the driver does not know pid {} as a CUDA process ({})", pid, r.name));
  }
  if (state != CudaProcessState::running) {
    return outcome(DriverOutcome::Kind::unavailable,
                   fmt::format("pid {} is {} in the driver, not RUNNING", pid,
                               proc::cuda_process_state_name(state)));
  }
  DriverOutcome result;
  auto start = Clock::now();
  if (auto r = driver_->lock(pid, options_.lock_timeout); !r.ok()) {
    if (r.not_ready()) {
      return outcome(
          DriverOutcome::Kind::not_idle,
          fmt::format(
              "its CUDA work did not pause within the lock's {} ms ({}); it runs on unharmed",
              options_.lock_timeout.count(), r.name));
    }
    return outcome(DriverOutcome::Kind::unavailable,
                   call_failed("cuCheckpointProcessLock", pid, r));
  }
  result.first_ms = ms_since(start);
  start = Clock::now();
  if (auto r = driver_->checkpoint(pid); !r.ok()) {
    return outcome(DriverOutcome::Kind::failed,
                   call_failed("cuCheckpointProcessCheckpoint", pid, r));
  }
  result.second_ms = ms_since(start);
  if (auto wrong = state_is_not(*driver_, pid, CudaProcessState::checkpointed, "checkpoint")) {
    return outcome(DriverOutcome::Kind::failed, *wrong);
  }
  return result;
}

DriverOutcome Hibernator::do_wake(pid_t pid) {
  DriverOutcome result;
  auto start = Clock::now();
  if (auto r = driver_->restore(pid); !r.ok()) {
    return outcome(DriverOutcome::Kind::failed, call_failed("cuCheckpointProcessRestore", pid, r));
  }
  result.first_ms = ms_since(start);
  start = Clock::now();
  if (auto r = driver_->unlock(pid); !r.ok()) {
    return outcome(DriverOutcome::Kind::failed, call_failed("cuCheckpointProcessUnlock", pid, r));
  }
  result.second_ms = ms_since(start);
  if (auto wrong = state_is_not(*driver_, pid, CudaProcessState::running, "restore")) {
    return outcome(DriverOutcome::Kind::failed, *wrong);
  }
  return result;
}

}  // namespace isohost::pool
