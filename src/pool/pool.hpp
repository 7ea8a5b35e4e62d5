#pragma once

// The pool of workers: one slot per environment, lazily started, replaced on death.
//
//   Pool pool(load_config("isohost.toml"));
//   nlohmann::json sum = pool.call("math", "operator:add", {1, 2}).get();  // 3
//   pool.shutdown();
//
// Thread safety: the public future-returning members may be called from any thread; they post
// to the pool's own event-loop thread, which owns all state (no lock guards it). The
// `*_on_loop` members are for code already on that thread (the control server).

#include <sys/types.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "pool/config.hpp"
#include "pool/crash_backoff.hpp"
#include "pool/memory_sampler.hpp"
#include "pool/zygote.hpp"
#include "worker/error.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

using worker::Error;
using worker::ErrorKind;
using worker::Outcome;

struct PoolOptions {
  // Directory holding the isohost_worker package; empty finds it next to the program.
  std::string runtime_dir;
  // End workers that a dead host left behind before starting any.
  bool sweep_orphans = true;
  // How often host RAM is checked against ram_budget_mb and ram_floor_mb, when either is set.
  std::chrono::milliseconds pressure_interval{2000};
};

struct WorkerStatus {
  std::string env;
  pid_t pid = -1;
  unsigned generation = 0;
  std::string state;
  double idle_seconds = 0;
  std::uint64_t calls = 0;
  worker::Worker::Clock::time_point spawned_at;
  std::optional<worker::Worker::Clock::time_point> ready_at;
  nlohmann::json hello;
  // Filled by status_with_memory: measured from outside, and the worker's own report.
  std::optional<ProcessMemory> memory;
  nlohmann::json report;
  // PSS when the worker said hello: the interpreter and its imports, its fixed RAM cost.
  std::optional<std::uint64_t> pss_at_ready;
  // "zygote" when forked from its environment's zygote (zygote_pid), "spawn" when started fresh.
  std::string origin = "spawn";
  pid_t zygote_pid = -1;
};

struct PoolStatus {
  pid_t host_pid = -1;
  std::vector<WorkerStatus> workers;
  // One per environment with `preload`.
  std::vector<ZygoteStatus> zygotes;
  // With memory: the host process itself (it holds no CUDA context) and the device.
  std::optional<ProcessMemory> host_memory;
  std::optional<probe::GpuDevice> device;
  std::string gpu_unavailable_reason;
  [[nodiscard]] nlohmann::json to_json() const;
};

// What a caller asks of an environment's worker.
struct Request {
  enum class Kind {
    call,     // run module:function on the main lane
    release,  // ask the worker to drop its caches (main lane, when idle)
    reap,     // end the worker once it is idle
    query,    // side lane: ping or memory, answered even mid-call
  };
  Kind kind = Kind::call;
  std::string env;
  // call: target, args, kwargs. query: op.
  nlohmann::json message = nlohmann::json::object();

  static Request call(std::string env, std::string target, nlohmann::json args = nlohmann::json::array(),
                      nlohmann::json kwargs = nlohmann::json::object());
};

class Pool {
 public:
  using Clock = worker::Worker::Clock;
  using Handler = std::function<void(Outcome)>;

  explicit Pool(Config config, PoolOptions options = {});
  // Shuts down (clean stop: shutdown frame, grace period, kill) and joins the loop thread.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Any thread. The future holds the result or throws worker::Error.
  std::future<nlohmann::json> submit(Request request);
  std::future<nlohmann::json> call(const std::string& env, const std::string& target,
                                   nlohmann::json args = nlohmann::json::array(),
                                   nlohmann::json kwargs = nlohmann::json::object());
  std::future<PoolStatus> status();

  // Any thread: stops taking work and ends every worker; returns at once. The loop thread
  // exits once the last worker is reaped (and `on_stopped` hooks have run).
  void request_shutdown();
  // Any thread but the loop's: request_shutdown(), then wait for the loop thread to finish.
  void shutdown();
  // Any thread but the loop's: waits until something else (a control request, a signal) has
  // shut the pool down.
  void wait_until_stopped();

  // Loop thread only.
  void submit_on_loop(Request request, Handler handler);
  [[nodiscard]] PoolStatus status_on_loop() const;
  // The status with every worker's memory: asks each live worker for its report on the side
  // lane (answered even mid-call), then measures RAM and VRAM from outside.
  void status_with_memory_on_loop(std::function<void(PoolStatus)> done);
  std::future<PoolStatus> status_with_memory();
  // Runs on the loop when shutdown completes (the control server closes its socket here).
  void on_stopped(std::function<void()> hook);

  asio::io_context& io() { return io_; }
  [[nodiscard]] const Config& config() const { return config_; }

 private:
  struct Pending {
    Request request;
    Handler handler;
  };
  struct Slot {
    EnvironmentConfig config;
    std::shared_ptr<worker::Worker> worker;
    unsigned generation = 0;
    std::deque<Pending> queue;
    CrashBackoff backoff;
    std::uint64_t calls = 0;
    Clock::time_point idle_since = Clock::now();
    std::unique_ptr<asio::steady_timer> idle_timer;     // idle reap
    std::unique_ptr<asio::steady_timer> release_timer;  // idle release
    // An idle worker is released once, not again until it has served another call.
    bool released_since_call = false;
    std::optional<std::uint64_t> pss_at_ready;
    // Environments with `preload` only (zygote.hpp).
    std::unique_ptr<Zygote> zygote;
    // A fork request for this slot's next worker is in flight.
    bool forking = false;
    // When start_worker was first asked for the next worker (it may wait for the zygote).
    std::optional<Clock::time_point> start_began;
    std::string origin = "spawn";
    pid_t zygote_pid = -1;
  };

  void pump(Slot& slot);
  void start_worker(Slot& slot);
  // The two ways start_worker brings a worker up (pool_zygote.cpp for the fork).
  void spawn_worker(Slot& slot, unsigned generation);
  void fork_worker(Slot& slot);
  [[nodiscard]] worker::WorkerOptions worker_options(const Slot& slot, unsigned generation) const;
  worker::Worker::Events worker_events(Slot& slot,
                                       const std::shared_ptr<std::weak_ptr<worker::Worker>>& weak);
  void track_started(Slot& slot, const std::shared_ptr<std::weak_ptr<worker::Worker>>& weak,
                     const char* origin);
  void make_zygotes();
  void dispatch(Slot& slot, Pending pending);
  void retire(Slot& slot, const std::string& reason);
  void arm_idle_timers(Slot& slot);
  // Runs `action` once the slot's worker has been idle for `window` (zero: never).
  void arm_idle_timer(Slot& slot, asio::steady_timer& timer, std::chrono::milliseconds window,
                      std::function<void(Slot&)> action);
  // Asks the idle worker to drop its caches and logs the receipt.
  void release_idle(Slot& slot);
  // RAM pressure (ram_pressure.cpp): every pressure_interval, reaps idle workers while all
  // workers' PSS exceeds the budget or MemAvailable is under the floor.
  void arm_pressure_check();
  void check_ram_pressure();
  void fail_queue(Slot& slot, const Error& error);
  void on_worker_exit(Slot& slot, const std::shared_ptr<worker::Worker>& w,
                      const worker::ExitReport& report);
  void finish_shutdown_if_done();
  [[nodiscard]] std::chrono::milliseconds call_timeout(const Slot& slot) const;

  Config config_;
  PoolOptions options_;
  std::string host_tag_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::map<std::string, Slot> slots_;
  // Every worker not yet reaped, current or retiring.
  std::vector<std::shared_ptr<worker::Worker>> live_;
  bool shutting_down_ = false;
  bool stopped_ = false;
  std::vector<std::function<void()>> stopped_hooks_;
  // Opened on first use, on the loop thread.
  std::unique_ptr<MemorySampler> sampler_;
  asio::steady_timer pressure_timer_{io_};
  std::thread thread_;
};

}  // namespace isohost::pool
