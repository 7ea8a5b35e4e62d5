#pragma once

// The zygote of one environment (docs/lifecycle.md#zygotes): a process of the environment's
// interpreter that imported its `preload` modules once, never touching CUDA, and forks
// workers on request. A forked worker is ready in milliseconds and shares the imported pages
// copy-on-write. The zygote forks with clone(CLONE_PARENT), so every forked worker is the
// host's own child: the pool adopts it (Worker::adopt) and watches it through a pidfd exactly
// like a spawned one, and the zygote's death takes no worker with it.
//
//   Zygote zygote(io, options, [&] { pump(slot); });
//   switch (zygote.prepare()) {
//     case Zygote::Readiness::fork: zygote.fork("vision", generation, done); break;
//     case Zygote::Readiness::wait: break;         // on_change runs when that changes
//     case Zygote::Readiness::unavailable: break;  // start the worker fresh
//   }
//
// Thread safety: none. Every member runs on the pool's event-loop thread, which spawns the
// zygote, so the zygote's death signal and its children's follow that thread.

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pool/crash_backoff.hpp"
#include "pool/memory_sampler.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

struct ZygoteStatus {
  std::string env;
  pid_t pid = -1;  // -1 while none runs
  // starting, ready, forking, stopping, absent (waiting for a restart or a first need), refused
  std::string state;
  std::vector<std::string> preload;
  std::uint64_t forks = 0;
  unsigned starts = 0;
  // Why it will not fork (CUDA initialised in it, threads left after preloading); workers of
  // its environment start fresh.
  std::optional<std::string> refusal;
  // Filled by Pool::status_with_memory.
  std::optional<ProcessMemory> memory;
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

class Zygote {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Readiness {
    fork,         // ready: fork() now
    wait,         // its first start, or a fork, is under way; on_change follows
    unavailable,  // refused, failed, restarting or stopping: start the worker fresh
  };

  // Once per fork(): the child to adopt, or nullopt and why there is none.
  using ForkDone =
      std::function<void(std::optional<worker::AdoptedProcess> child, const std::string& failure)>;

  // `options` are the environment's worker options with `preload` set. `on_change` runs when
  // the zygote becomes ready, fails to start, refuses, or ends.
  Zygote(asio::io_context& io, worker::WorkerOptions options, std::function<void()> on_change);

  // What a worker start should do now; starts the zygote if none runs and back-off allows.
  Readiness prepare();

  // Valid after prepare() said fork. Sends the fork request with the new worker's channels;
  // `done` runs once, on the loop.
  void fork(const std::string& env, unsigned generation, ForkDone done);

  // Ends the zygote (shutdown frame, then a kill after `grace`) and restarts it no more.
  void shutdown(std::chrono::milliseconds grace);

  // A zygote process exists that has not been reaped yet.
  [[nodiscard]] bool alive() const { return process_ != nullptr; }
  [[nodiscard]] pid_t pid() const { return process_ ? process_->pid() : -1; }
  [[nodiscard]] ZygoteStatus status() const;

 private:
  // The pid in a fork answer, once it is shown to be the new child: a host's child (so it can
  // be reaped), not the zygote, and started after `asked_at` (probe::boot_clock_ticks()). Opens
  // its pidfd into `pidfd`. Throws std::runtime_error saying why not.
  pid_t new_child(const nlohmann::ordered_json& answer, std::uint64_t asked_at,
                  wire::UniqueFd& pidfd) const;

  void start();
  void on_ready(const isohost::Error* error);
  void on_exit(const worker::ExitReport& report);
  // Counts a start that failed (the process could not be spawned, or ended before hello) and
  // returns how long until the next try. That try waits for a worker start to ask for it
  // (prepare): an interpreter that is missing or a preload that does not import would fail
  // again, and retrying on a timer only filled the log, every 30 s for as long as the host ran.
  Clock::duration failed_to_start(const std::string& reason);
  // Restarts a zygote that ended after it was ready, in the background, after the back-off.
  void schedule_restart();
  void refuse(const std::string& reason);
  [[nodiscard]] const std::string& env() const { return options_.env_name; }

  asio::io_context& io_;
  worker::WorkerOptions options_;
  std::function<void()> on_change_;
  std::shared_ptr<worker::Worker> process_;
  CrashBackoff backoff_;
  asio::steady_timer restart_timer_;
  std::optional<std::string> refusal_;
  bool stopping_ = false;
  // The current process failed before hello; its exit is already counted.
  bool failed_start_ = false;
  // No start before this, after one that failed: at least kRetryAfterFailedStart, so that the
  // back-off's first free failures do not start it again for each worker start of one burst.
  Clock::time_point retry_at_{};
  static constexpr std::chrono::seconds kRetryAfterFailedStart{1};
  unsigned starts_ = 0;
  std::uint64_t forks_ = 0;
};

}  // namespace isohost::pool
