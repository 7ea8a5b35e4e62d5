#pragma once

// The pool of workers: one slot per environment, lazily started, replaced on death.
//
//   Pool pool(load_config("isohost.toml"));
//   nlohmann::ordered_json sum = pool.call("math", "operator:add", {1, 2}).get();  // 3
//   pool.shutdown();
//
// Thread safety: the public future-returning members may be called from any thread; they post
// to the pool's own event-loop thread, which owns all state (no lock guards it). The
// `*_on_loop` members are for code already on that thread (the control server).

#include <sys/types.h>

#include <asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "error/error.hpp"
#include "memory/admission.hpp"
#include "memory/snapshot.hpp"
#include "pool/admission_driver.hpp"
#include "pool/config.hpp"
#include "pool/crash_backoff.hpp"
#include "pool/env_metrics.hpp"
#include "pool/env_state.hpp"
#include "pool/hibernator.hpp"
#include "pool/idle_spell.hpp"
#include "pool/loop_clock.hpp"
#include "pool/loop_thread.hpp"
#include "pool/memory_sampler.hpp"
#include "pool/pool_phase.hpp"
#include "pool/pool_status.hpp"
#include "pool/ram_pressure_sweep.hpp"
#include "pool/request.hpp"
#include "pool/sampling_thread.hpp"
#include "pool/zygote.hpp"
#include "worker/outcome.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

using worker::Outcome;

// Whether a worker's runtime offers `sleep`, from its hello's capabilities (null while it has
// said no hello yet).
bool offers_sleep(const nlohmann::ordered_json& hello);

// Brings up one worker process (Worker::launch's shape). The pool's seam for starting workers:
// a test puts one that fails on cue or counts its starts.
using LaunchWorker = std::function<std::shared_ptr<worker::Worker>(
    asio::io_context&, worker::WorkerOptions, worker::Worker::Events)>;

struct PoolOptions {
  // Directory holding the isohost_worker package; empty finds it next to the program.
  std::string runtime_dir;
  // End workers that a dead host left behind before starting any.
  bool sweep_orphans = true;
  // How often host RAM is checked against ram_budget_mb and ram_floor_mb, when either is set.
  std::chrono::milliseconds pressure_interval{2000};
  // The CUDA driver hibernation loads at its first use; empty: $ISOHOST_CUDA_LIBRARY if set
  // (tests point it at a stand-in), else libcuda.so.1.
  std::string cuda_library;
  // How long a hibernation waits for the worker's CUDA work to pause before giving up.
  std::chrono::milliseconds hibernate_lock_timeout{2000};
  // How long the event loop polls after a burst of work before it sleeps (loop_thread.hpp).
  std::chrono::microseconds poll_window{50};
  // How long a status with memory waits for a worker's report (its side lane goes unanswered
  // while a call holds the GIL in C code); it shows that worker without one after.
  std::chrono::milliseconds report_wait{2000};
  // What the pool's timers and decisions read (loop_clock.hpp); unset: steady time. Tests give
  // a ManualClock.
  std::shared_ptr<LoopClock> clock;
  // How spawned workers are brought up (zygote forks are the zygote's); unset: Worker::launch.
  LaunchWorker launch_worker;
  // A tell a worker sends while none of its calls is in flight (a thread or a task of its own
  // between calls; docs/protocol.md, "Asks"), with its environment's name; runs on the loop
  // thread. Unset: such tells are logged and dropped.
  std::function<void(const std::string& env, const nlohmann::ordered_json& tell)> on_tell;
  // An ask a worker sends while none of its calls is in flight, with its environment's name;
  // runs on the loop thread. `answer` takes the whole reply ({"ok": true, "value": V} or
  // {"ok": false, "error": {"type", "message"}}), from any thread, once, before the pool is
  // destroyed; the worker waits for it. Unset: such asks are answered "Unsupported".
  std::function<void(const std::string& env, const nlohmann::ordered_json& ask,
                     std::function<void(nlohmann::ordered_json)> answer)>
      on_ask;
  // Each line a worker writes to its stdout or stderr, instead of the host's log; runs on the
  // loop thread and must not block (Worker::Events::on_output: a call's lines come before its
  // outcome). Zygotes' own lines stay in the log. Unset: logged.
  std::function<void(worker::OutputLine line)> on_output;
};

class Pool : private AdmissionSteps {
 public:
  using Clock = worker::Worker::Clock;
  using Handler = std::function<void(Outcome)>;

  explicit Pool(Config config, PoolOptions options = {});
  // Shuts down (clean stop: shutdown frame, grace period, kill) and joins the loop thread.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Any thread. The future holds the result or throws isohost::Error.
  std::future<nlohmann::ordered_json> submit(Request request);
  std::future<nlohmann::ordered_json> call(
      const std::string& env, const std::string& target,
      nlohmann::ordered_json args = nlohmann::ordered_json::array(),
      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object());
  std::future<PoolStatus> status();
  // Any thread: `handler` runs once on the loop thread with the whole Outcome (a pickled
  // value and its descriptors included), so it must not block.
  void submit(Request request, Handler handler);

  // Any thread: a ticket no other request of this pool has (Request::ticket).
  std::uint64_t new_ticket() { return next_ticket_.fetch_add(1) + 1; }
  // Any thread: stops the call with this ticket. Still queued: it fails with Interrupted at
  // once. Running: its worker is asked to stop it, and killed if it has not after `grace`
  // (Worker::interrupt). Finished or unknown: nothing happens.
  void interrupt(std::uint64_t ticket, std::chrono::milliseconds grace);

  // Any thread: stops taking work and ends every worker; returns at once. The loop thread
  // exits once the last worker is reaped (and `on_stopped` hooks have run).
  void request_shutdown();
  // Any thread but the loop's: request_shutdown(), then wait for the loop thread to finish.
  void shutdown();
  // Any thread but the loop's: waits until something else (a control request, a signal) has
  // shut the pool down.
  void wait_until_stopped();

  // Loop thread only. `handler` is answered exactly once, with an error should taking the
  // request throw (take_on_loop): an exception left to the loop's catch-all would leave the
  // caller waiting forever.
  void submit_on_loop(Request request, Handler handler);
  [[nodiscard]] PoolStatus status_on_loop() const;
  // Statuses with memory and metrics (pool_memory.cpp). Whose report a status with memory asks for.
  // `every_worker` (ps) waits up to PoolOptions::report_wait for a worker whose call holds the GIL
  // in C code; `cached_while_busy` (admission) takes a busy worker's last report instead where
  // there is one: a busy worker is no step's candidate, and its VRAM is read from outside either
  // way (only where NVML cannot see our pids does a context opened since that report go
  // unattributed, and then it counts as foreign: never free).
  enum class Reports : std::uint8_t { every_worker, cached_while_busy };
  // The status with every worker's memory: asks live workers for their reports on the side
  // lane (answered even mid-call), then measures RAM and VRAM from outside.
  void status_with_memory_on_loop(std::function<void(PoolStatus)> done,
                                  Reports reports = Reports::every_worker,
                                  MemorySampler::RamReading ram = MemorySampler::RamReading::exact);
  std::future<PoolStatus> status_with_memory();
  // The status as it is now, with the memory of the last sample if it is at most `max_age` old
  // (workers matched by pid; one started since shows none), else with a fresh one. For views
  // that ask every second: each sample walks every worker's smaps_rollup on this thread.
  void status_with_recent_memory_on_loop(std::chrono::milliseconds max_age,
                                         std::function<void(PoolStatus)> done);
  void metrics_on_loop(std::chrono::milliseconds max_age, std::function<void(PoolMetrics)> done);
  std::future<PoolMetrics> metrics(std::chrono::milliseconds max_age);
  // Runs on the loop when shutdown completes (the control server closes its socket here).
  void on_stopped(std::function<void()> hook);

  // Loop thread only (pool/hibernation.cpp). Hibernates `env`'s worker if it is idle, then
  // calls `done` once, on the loop:
  //   success {"hibernated": true, "pid", "generation", "vram_moved", "ram_grown", "seconds"}
  //           (vram_moved: bytes off the card, null where NVML cannot see the worker);
  //   success {"hibernated": false, "reason": "..."}: nothing changed (no worker, busy, not
  //           idle for the driver's lock, no CUDA context, no driver or no checkpoint API,
  //           `hibernate = false`);
  //   failure Error(hibernate_failed): the driver failed part-way; the worker was retired.
  // A call that arrives meanwhile waits, then wakes the worker. Never waits for a busy worker.
  void hibernate_on_loop(const std::string& env, Handler done);

  asio::io_context& io() { return loop_.io(); }
  [[nodiscard]] const Config& config() const { return config_; }

 private:
  struct Pending {
    Request request;
    Handler handler;
  };
  struct Slot {
    EnvironmentConfig config;
    EnvState state = EnvState::empty;
    // Set in running and admitting_wake only.
    std::shared_ptr<worker::Worker> worker;
    unsigned generation = 0;
    std::deque<Pending> queue;
    // The ticket of the call its worker runs now (0: none, or one without a ticket).
    std::uint64_t ticket_in_flight = 0;
    CrashBackoff backoff;
    std::uint64_t calls = 0;
    // Behind a pointer: its timers cannot move, and slots live in a map that is built once.
    std::unique_ptr<IdleSpell> idle;
    std::optional<std::uint64_t> pss_at_ready;
    std::optional<Hibernation> hibernation;
    std::optional<Sleep> sleep;
    // Environments with `preload` only (zygote.hpp).
    std::unique_ptr<Zygote> zygote;
    // When start_worker was first asked for the next worker (it may wait for the zygote).
    std::optional<Clock::time_point> start_began;
    // How the worker came: "spawn", or "zygote" and the zygote's pid.
    struct Origin {
      std::string how = "spawn";
      pid_t zygote_pid = -1;
    } origin;
    // Kept across worker generations, for the live view.
    EnvMetrics metrics;
    // Request::Kind::keep: its workers are not reaped for admission, RAM or idleness.
    bool kept = false;
  };

  // submit_on_loop's work, which may throw.
  void take_on_loop(Request request, Handler handler);
  void pump(Slot& slot);
  void interrupt_on_loop(std::uint64_t ticket, std::chrono::milliseconds grace);
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
  // A release or sleep that reached a hibernated or asleep worker: answered without waking it.
  void answer_resting(Slot& slot, Pending pending);
  // Request::on_ask as the worker takes it: answers posted back to the loop.
  worker::Worker::AskHandler ask_handler(decltype(Request::on_ask) on_ask);
  // `answer`, callable from any thread: it runs on the loop, where the worker is written to.
  std::function<void(nlohmann::ordered_json)> on_loop(
      std::function<void(nlohmann::ordered_json)> answer);
  void retire(Slot& slot, const std::string& reason);
  // Request::Kind::keep on the loop.
  void keep(Slot& slot, bool kept);
  void arm_idle_timers(Slot& slot);
  // Runs `action` once the slot's worker has been idle for `window` (zero: never).
  void arm_idle_timer(Slot& slot, Alarm& alarm, std::chrono::milliseconds window,
                      std::function<void(Slot&)> action);
  // RAM pressure (ram_pressure.cpp): every pressure_interval, reaps idle workers while all
  // workers' PSS exceeds the budget or MemAvailable is under the floor. The sweep's reading,
  // taken on the sampling thread.
  RamPressureSweep::Read pressure_reading();
  // Reaps idle workers, largest PSS first, while a limit is broken.
  void relieve_ram_pressure(const PressureReading& reading);
  // Asks the idle worker to drop its caches and logs the receipt as `why`; `done` runs after.
  void release(Slot& slot, const std::string& why, std::function<void()> done = nullptr);
  // Admission (vram_admission.cpp; admission_driver.hpp decides): reserve_vram from a worker,
  // make_room from the embedding host, and the steps the driver asks of idle workers.
  void on_worker_request(Slot& slot, const std::shared_ptr<worker::Worker>& w,
                         const nlohmann::ordered_json& request,
                         std::function<void(nlohmann::ordered_json)> answer);
  void make_room_for_host(const nlohmann::ordered_json& message, Handler handler);
  void measure(std::function<void(PoolStatus)> done) override;
  Begun begin_step(const memory::AdmissionStep& step, const std::string& for_env,
                   const std::string& why, StepDone done) override;
  void note_refusal(const std::string& env) override;
  void fail_queue(Slot& slot, const Error& error);
  // Sleep (sleep.cpp). Asks the idle worker to move its models into its host RAM; `done` hears
  // the worker's receipt ({"asleep": true, ...} or {"asleep": false, "reason"}) or its error.
  void put_to_sleep(Slot& slot, Handler done);
  // Sends `wake` to the worker, which must be asleep with its room on the card admitted; marks
  // it ready and pumps once it is. `done` may be empty (a call is waiting in the queue).
  // `grant`, if any, is settled once the worker has answered.
  void wake_from_sleep(Slot& slot, const std::shared_ptr<worker::Worker>& w,
                       std::optional<memory::GrantId> grant, Handler done);
  // After a sleep that failed: marks the worker asleep if its report says it is, then hands
  // `failure` to `done`.
  void check_asleep_after_failure(Slot& slot, const std::shared_ptr<worker::Worker>& w,
                                  Outcome failure, Handler done);
  // Hibernation (hibernation.cpp): sleep first, then the driver's checkpoint of what is left.
  void begin_hibernation(Slot& slot, Handler done);
  // The driver's part, once the worker slept or could not (record.driver_only_because).
  void checkpoint(Slot& slot, Hibernation record, Handler done);
  // Once its VRAM is sampled (off the loop): the driver's lock and checkpoint, if it has a context.
  void lock_and_checkpoint(Slot& slot, const std::shared_ptr<worker::Worker>& w, bool cuda,
                           const ProcessMemory& sample, Hibernation record, Handler done);
  // A hibernation that did not happen leaves the worker as it was: ready, or asleep.
  void back_to_idle(Slot& slot, const std::shared_ptr<worker::Worker>& w);
  void finish_hibernation(Slot& slot, const std::shared_ptr<worker::Worker>& w, Hibernation record,
                          DriverOutcome outcome, Handler done);
  // Restores the slot's hibernated worker once admission has made room on the card for what it
  // moved off; `done` (may be empty) hears how it went. A wake the queue asked for fails the
  // queue's first request if there is no room (the worker stays hibernated) or the restore fails.
  void begin_wake(Slot& slot, Handler done);
  void restore(Slot& slot, const std::shared_ptr<worker::Worker>& w,
               std::optional<memory::GrantId> grant, Handler done);
  // `models_grant`: the wake's grant, still open while a slept worker's models come back.
  void finish_wake(Slot& slot, const std::shared_ptr<worker::Worker>& w, DriverOutcome outcome,
                   std::optional<std::uint64_t> rss_before,
                   std::optional<memory::GrantId> models_grant, Handler done);
  // Hands `error` to `done`, or else to the queue's first request.
  void fail_wake(Slot& slot, const Error& error, Handler done);
  void hibernate_idle(Slot& slot);
  void sleep_idle(Slot& slot);
  [[nodiscard]] std::optional<std::string> cannot_hibernate(const Slot& slot) const;
  Hibernator& hibernator();
  void on_worker_exit(Slot& slot, const std::shared_ptr<worker::Worker>& w,
                      const worker::ExitReport& report);
  void finish_shutdown_if_done();
  // The last report `pid` gave, from the last status with memory.
  [[nodiscard]] std::optional<nlohmann::ordered_json> cached_report(pid_t pid) const;
  // Admission made room in `slot`'s environment for `for_env` (the live view shows it).
  static void note_admission_step(Slot& slot, const char* action, const std::string& for_env);
  [[nodiscard]] std::chrono::milliseconds call_timeout(const Slot& slot) const;
  [[nodiscard]] LoopClock& clock() const { return *options_.clock; }

  Config config_;
  // With every default filled in (the runtime directory, the CUDA library, the clock).
  PoolOptions options_;
  std::string host_tag_;
  // Spawning happens on its thread, so it is the thread the workers' death signal watches: it
  // lives exactly as long as the pool.
  LoopThread loop_;
  std::map<std::string, Slot> slots_;
  // Every worker not yet reaped, current or retiring.
  std::vector<std::shared_ptr<worker::Worker>> live_;
  std::atomic<std::uint64_t> next_ticket_{0};
  PoolPhase phase_;
  // Where every worker's memory is measured, off the loop.
  SamplingThread sampling_{loop_.io(), config_.host.simulated_gpu};
  // The last status with memory and when it was taken (status_with_recent_memory_on_loop).
  struct RecentMemory {
    PoolStatus status;
    Clock::time_point at;
  };
  std::optional<RecentMemory> recent_memory_;
  AdmissionDriver admission_{loop_.io(), clock(), *this, config_.host};
  RamPressureSweep ram_pressure_{clock().alarm(loop_.io()), options_.pressure_interval,
                                 pressure_reading(),
                                 [this](const PressureReading& r) { relieve_ram_pressure(r); }};
  // What sleeps, wakes and the driver took per GiB on this machine, for the planner.
  memory::TransferRates measured_rates_;
  // Made at the first hibernation; its thread makes the driver's calls.
  std::unique_ptr<Hibernator> hibernator_;
};

}  // namespace isohost::pool
