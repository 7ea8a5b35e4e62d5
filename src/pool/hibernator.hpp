#pragma once

// Runs the CUDA driver's checkpoint calls for the pool on a thread of their own, since one
// takes 0.4 to 5 s (measured on an H200) and the pool's loop must keep serving meanwhile. Each
// job's result is posted back to the loop.
//
//   Hibernator hibernator(io, {.library = "libcuda.so.1"});
//   hibernator.hibernate(pid, [](DriverOutcome o) { /* on the loop */ });
//
// The driver is opened (dlopen, cuInit(0)) on that thread at the first job, never before: a host
// that never hibernates never loads it. Jobs run one at a time, in order.
//
// Thread safety: hibernate() and wake() are called on the loop thread; the callbacks run there.
// Each job holds the loop's work, so the loop does not stop with a job in flight.

#include <sys/types.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace isohost::proc {
class CudaCheckpoint;
}

namespace isohost::pool {

struct DriverOutcome {
  enum class Kind {
    done,         // hibernated (LOCKED and CHECKPOINTED), or woken (restored and RUNNING)
    unavailable,  // hibernation cannot work here (no driver, no API, no CUDA process): unchanged
    not_idle,     // the lock timed out with CUDA work running in the process: unchanged
    failed,       // the driver failed part-way; the process must be retired
  };
  Kind kind = Kind::done;
  // For a person: why, with the driver's error name.
  std::string message;
  // Each step's duration: lock and checkpoint, or restore and unlock.
  double first_ms = 0;
  double second_ms = 0;
  double seconds = 0;
};

struct HibernatorOptions {
  // What to dlopen: the driver, or a stand-in in tests.
  std::string library = "libcuda.so.1";
  // How long the lock waits for the worker's CUDA work to pause (measured: 0.5 ms when idle).
  std::chrono::milliseconds lock_timeout{2000};
};

class Hibernator {
 public:
  using Done = std::function<void(DriverOutcome)>;

  Hibernator(asio::io_context& io, HibernatorOptions options);
  // Finishes the job in flight; jobs not begun are dropped with their callbacks.
  ~Hibernator();
  Hibernator(const Hibernator&) = delete;
  Hibernator& operator=(const Hibernator&) = delete;

  // RUNNING -> lock -> checkpoint -> CHECKPOINTED.
  void hibernate(pid_t pid, Done done);
  // CHECKPOINTED -> restore -> unlock -> RUNNING.
  void wake(pid_t pid, Done done);

 private:
  struct Job {
    bool hibernate = true;
    pid_t pid = -1;
    Done done;
    asio::executor_work_guard<asio::io_context::executor_type> work;
  };

  void enqueue(bool hibernate, pid_t pid, Done done);
  void run();
  DriverOutcome carry_out(const Job& job);
  DriverOutcome do_hibernate(pid_t pid);
  DriverOutcome do_wake(pid_t pid);

  asio::io_context& io_;
  HibernatorOptions options_;
  // Touched only on the job thread.
  std::unique_ptr<proc::CudaCheckpoint> driver_;
  std::string unavailable_;
  bool opened_ = false;

  std::mutex mutex_;
  std::condition_variable wakeup_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace isohost::pool
