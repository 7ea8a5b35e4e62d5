#pragma once

// The admission driver (docs/memory.md): requests for VRAM (a worker's reserve_vram, a resting
// worker's wake, the embedding host's own load) are decided on the loop, one at a time, from
// fresh books (memory::plan_admission). The driver carries out a plan's cheapest kind of step
// through the pool (AdmissionSteps), lets the driver's figures catch up, and plans again until
// the request is granted or refused. A request that must wait for busy workers steps aside, so
// the ones behind it, wakes included, are decided meanwhile.
//
//   AdmissionDriver driver(io, clock, pool_as_steps, config.host);
//   driver.ask(std::make_shared<Admission>(Admission{.env = "sdxl", .bytes = 8 << 30, ...}));
//
// Loop thread only.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "memory/admission.hpp"
#include "memory/grant_book.hpp"
#include "pool/config.hpp"
#include "pool/loop_clock.hpp"
#include "pool/pool_status.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

// One request for VRAM and what was done for it so far.
struct Admission {
  std::string env;
  // A wake rather than a reserve_vram; the log says which.
  bool wake = false;
  // For the embedding host (Request::Kind::make_room): no worker asks, and no grant is booked.
  bool for_host = false;
  std::weak_ptr<worker::Worker> requester;
  unsigned device = 0;
  std::uint64_t bytes = 0;
  LoopClock::time_point asked_at;  // by the driver's clock
  std::function<void(nlohmann::ordered_json)> answer;
  // The strongest step carried out so far, and how many rounds of steps.
  memory::AdmissionOutcome made_room = memory::AdmissionOutcome::grant;
  int rounds = 0;
  int settle_polls = 0;
  bool reaped_last_round = false;
  bool said_waiting = false;
  std::vector<std::string> steps_done;
  // Each round's plan in words: the ways weighed, their prices, the one chosen.
  std::vector<std::string> plans;
  // Workers whose hibernation was tried for this request and did not happen, with why: the
  // next plans reap them instead.
  std::map<std::string, std::string> not_hibernated;
  // Likewise for sleeps: the next plans hibernate or reap them instead.
  std::map<std::string, std::string> not_slept;
  // Added to the explanation (why there are no devices).
  std::string note;
};

// What the driver needs of the pool: fresh books, and hands on the idle workers.
class AdmissionSteps {
 public:
  // How a release, sleep or hibernation went: whether it happened, and why not.
  using StepDone = std::function<void(bool happened, std::string why_not)>;
  // A step begun: `ending` is set for a reap (the driver waits for that worker's end).
  struct Begun {
    bool begun = false;
    std::weak_ptr<worker::Worker> ending;
  };

  virtual ~AdmissionSteps() = default;
  // The status with every worker's memory and the books (PoolStatus::snapshot), on the loop.
  virtual void measure(std::function<void(PoolStatus)> done) = 0;
  // Begins `step` on its worker if that worker can still take it (it may have started a call
  // since the plan was made); `done` runs once for a release, sleep or hibernation that began.
  virtual Begun begin_step(const memory::AdmissionStep& step, const std::string& for_env,
                           const std::string& why, StepDone done) = 0;
  // A request of `env` was refused (the live view counts them).
  virtual void note_refusal(const std::string& env) = 0;
};

class AdmissionDriver {
 public:
  AdmissionDriver(asio::io_context& io, LoopClock& clock, AdmissionSteps& steps,
                  const HostSettings& host);
  AdmissionDriver(const AdmissionDriver&) = delete;
  AdmissionDriver& operator=(const AdmissionDriver&) = delete;

  // Queues `job`; its answer runs once, on the loop, unless the driver stops first (then it is
  // dropped: an answer that must be heard says so in its destructor).
  void ask(std::shared_ptr<Admission> job);
  // The pool is shutting down: nothing more is decided.
  void stop();
  // VRAM promised and not yet seen in use.
  memory::GrantBook& grants() { return grants_; }
  [[nodiscard]] const memory::GrantBook& grants() const { return grants_; }

 private:
  void next();
  void plan(std::shared_ptr<Admission> job);
  void decide(const std::shared_ptr<Admission>& job, const PoolStatus& status);
  void make_room(const std::shared_ptr<Admission>& job, const memory::AdmissionPlan& plan);
  // Plans again once every step begun has answered and every reaped worker has gone.
  void when_steps_done(const std::shared_ptr<Admission>& job,
                       std::shared_ptr<std::size_t> in_flight,
                       std::vector<std::weak_ptr<worker::Worker>> ending);
  void set_aside(const std::shared_ptr<Admission>& job);
  void answer(const std::shared_ptr<Admission>& job, const memory::AdmissionPlan& plan);
  void expire_grants();

  asio::io_context& io_;
  LoopClock& clock_;
  AdmissionSteps& steps_;
  const HostSettings& host_;
  memory::GrantBook grants_;
  std::deque<std::shared_ptr<Admission>> queue_;
  // One request is decided at a time.
  bool deciding_ = false;
  bool stopped_ = false;
  // Those waiting for busy workers, planned again every kWaitPoll.
  std::deque<std::shared_ptr<Admission>> waiting_;
  std::unique_ptr<Alarm> waiting_alarm_;
  // Between rounds: the settling poll, or the poll for a round's steps to be done.
  std::unique_ptr<Alarm> round_alarm_;
};

}  // namespace isohost::pool
