#include "pool/admission_driver.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <asio/post.hpp>

#include "memory/ledger.hpp"

namespace isohost::pool {
namespace {

using worker::Worker;
using worker::WorkerState;

// After a round of steps, how long the driver may take to show the memory free before the
// planner is trusted to ask for more: a reaped process's VRAM goes back as its context is torn
// down, a little after the pid is reaped.
constexpr int kSettlePolls = 5;
constexpr auto kSettlePoll = std::chrono::milliseconds(100);
// A request waiting for busy workers is planned again this often.
constexpr auto kWaitPoll = std::chrono::milliseconds(100);
// How often a round's steps are checked for having finished.
constexpr auto kStepPoll = std::chrono::milliseconds(10);
// Rounds of steps (each of one kind: release, sleep, hibernate, reap) before a request that is
// still short is refused.
constexpr int kMaxRounds = 6;

std::uint64_t to_mib(std::uint64_t bytes) { return bytes >> 20; }

}  // namespace

AdmissionDriver::AdmissionDriver(asio::io_context& io, LoopClock& clock, AdmissionSteps& steps,
                                 const HostSettings& host)
    : io_(io),
      clock_(clock),
      steps_(steps),
      host_(host),
      waiting_alarm_(clock.alarm(io)),
      round_alarm_(clock.alarm(io)) {}

void AdmissionDriver::ask(std::shared_ptr<Admission> job) {
  queue_.push_back(std::move(job));
  next();
}

void AdmissionDriver::stop() {
  stopped_ = true;
  queue_.clear();
  waiting_.clear();
  round_alarm_->cancel();
  waiting_alarm_->cancel();
}

void AdmissionDriver::next() {
  if (deciding_ || queue_.empty() || stopped_) return;
  deciding_ = true;
  auto job = std::move(queue_.front());
  queue_.pop_front();
  plan(std::move(job));
}

void AdmissionDriver::plan(std::shared_ptr<Admission> job) {
  expire_grants();
  steps_.measure([this, job = std::move(job)](PoolStatus status) { decide(job, status); });
}

void AdmissionDriver::expire_grants() {
  for (const auto& g : grants_.expire(clock_.now(), host_.grant_lifetime)) {
    spdlog::info("grant {} of {} MiB on GPU {} to '{}' expired unused; its bytes are free again",
                 g.id, to_mib(g.bytes), g.device, g.requester);
  }
}

void AdmissionDriver::decide(const std::shared_ptr<Admission>& job, const PoolStatus& status) {
  const auto requester = job->requester.lock();
  const bool requester_gone =
      !job->for_host && (!requester || requester->state() == WorkerState::dead ||
                         requester->state() == WorkerState::stopping);
  if (stopped_ || requester_gone) {
    // Nobody left to answer; the next request goes ahead.
    deciding_ = false;
    next();
    return;
  }
  auto snapshot = *status.snapshot;
  for (auto& p : snapshot.processes) {
    if (job->not_hibernated.contains(p.worker_id)) p.hibernation.driver_supports = false;
    if (job->not_slept.contains(p.worker_id)) p.can_sleep = false;
  }
  const memory::AdmissionRequest request{.requester = job->env,
                                         .device = static_cast<int>(job->device),
                                         .bytes = job->bytes,
                                         .asked_at = job->asked_at};
  auto plan =
      memory::plan_admission(memory::build_ledger(snapshot, grants_.outstanding()), request);
  const bool needs_steps = plan.grants() && plan.outcome != memory::AdmissionOutcome::grant;
  if (needs_steps && job->reaped_last_round && job->settle_polls < kSettlePolls) {
    ++job->settle_polls;
    round_alarm_->set(kSettlePoll, [this, job] { this->plan(job); });
    return;
  }
  if (job->wake && !plan.device_found && status.devices.empty()) {
    // With no view of the card the books cannot say no; keeping the worker from ever waking
    // would be worse than its wake failing on a full card, which leaves it as it was.
    plan.outcome = memory::AdmissionOutcome::grant;
    job->note = "there is no GPU view (" + status.gpu_unavailable_reason +
                "): the wake goes ahead unchecked";
  }
  if (plan.outcome == memory::AdmissionOutcome::grant) {
    if (!job->for_host)
      plan.grant_id = grants_.add(job->env, request.device, request.bytes, clock_.now());
  } else if (needs_steps && job->rounds < kMaxRounds) {
    make_room(job, plan);
    return;
  } else if (plan.outcome == memory::AdmissionOutcome::wait) {
    if (!job->said_waiting) {
      job->said_waiting = true;
      spdlog::info("admission for '{}' waits for busy workers: {}", job->env, plan.explain());
    }
    set_aside(job);
    return;
  } else if (needs_steps) {
    plan.outcome = memory::AdmissionOutcome::refuse;  // rounds of steps did not make the room
  }
  if (job->note.empty() && !plan.device_found && status.devices.empty() &&
      !status.gpu_unavailable_reason.empty()) {
    job->note = "there is no GPU view: " + status.gpu_unavailable_reason;
  }
  answer(job, plan);
}

void AdmissionDriver::set_aside(const std::shared_ptr<Admission>& job) {
  waiting_.push_back(job);
  deciding_ = false;
  if (waiting_.size() == 1) {
    // One poll for all that wait: each is planned again, first in the line, in its turn.
    waiting_alarm_->set(kWaitPoll, [this] {
      if (stopped_) return;
      auto waiting = std::exchange(waiting_, {});
      queue_.insert(queue_.begin(), waiting.begin(), waiting.end());
      next();
    });
  }
  asio::post(io_, [this] { next(); });
}

void AdmissionDriver::make_room(const std::shared_ptr<Admission>& job,
                                const memory::AdmissionPlan& plan) {
  ++job->rounds;
  job->settle_polls = 0;
  // Only the cheapest kind of step in the plan is carried out before planning again: a release
  // may give back more than the worker's report promised (its own caches), and then no
  // hibernation or reap is needed at all.
  const auto kind =
      std::min_element(plan.steps.begin(), plan.steps.end(), [](const auto& a, const auto& b) {
        return a.kind < b.kind;
      })->kind;
  job->reaped_last_round = kind == memory::StepKind::reap;
  job->plans.push_back(plan.explain());
  spdlog::info("admission for '{}' makes room ({} first): {}", job->env, memory::to_string(kind),
               job->plans.back());
  const auto why = fmt::format("admission for '{}' ({} MiB on GPU {})", job->env,
                               to_mib(job->bytes), job->device);
  auto in_flight = std::make_shared<std::size_t>(0);
  std::vector<std::weak_ptr<Worker>> ending;
  for (const auto& step : plan.steps) {
    if (step.kind != kind) continue;
    const auto env = step.worker_id;
    ++*in_flight;  // before it begins: a step may answer at once
    auto begun = steps_.begin_step(
        step, job->env, why, [job, in_flight, env, kind](bool happened, std::string why_not) {
          --*in_flight;
          if (kind == memory::StepKind::sleep) {
            if (happened) {
              job->steps_done.push_back("slept '" + env + "'");
              job->made_room = std::max(job->made_room, memory::AdmissionOutcome::sleep_then_grant);
            } else {
              job->not_slept[env] = std::move(why_not);
            }
          } else if (kind == memory::StepKind::hibernate) {
            if (happened) {
              job->steps_done.push_back("hibernated '" + env + "'");
              job->made_room =
                  std::max(job->made_room, memory::AdmissionOutcome::hibernate_then_grant);
            } else {
              job->not_hibernated[env] = std::move(why_not);
            }
          }
        });
    if (!begun.begun || kind == memory::StepKind::reap) --*in_flight;  // no answer comes
    if (!begun.begun) continue;
    if (kind == memory::StepKind::reap) {
      job->steps_done.push_back("reaped '" + env + "'");
      job->made_room = std::max(job->made_room, memory::AdmissionOutcome::reap_then_grant);
      ending.push_back(std::move(begun.ending));
    } else if (kind == memory::StepKind::release) {
      job->steps_done.push_back("released '" + env + "'");
      job->made_room = std::max(job->made_room, memory::AdmissionOutcome::release_then_grant);
    }
  }
  when_steps_done(job, std::move(in_flight), std::move(ending));
}

void AdmissionDriver::when_steps_done(const std::shared_ptr<Admission>& job,
                                      std::shared_ptr<std::size_t> in_flight,
                                      std::vector<std::weak_ptr<Worker>> ending) {
  // Each step always answers (a release is bounded by the call timeout, a hibernation by the
  // driver: 10 GiB takes some 5 s), and each reaped worker's end by its shutdown grace.
  const auto deadline = clock_.now() + host_.shutdown_grace + std::chrono::seconds(2);
  // The poll holds itself only weakly (a strong self-capture would be a cycle that never frees);
  // the alarm set for the next poll keeps it alive meanwhile.
  auto poll = std::make_shared<std::function<void()>>();
  *poll = [this, job, in_flight, ending = std::move(ending), deadline,
           self = std::weak_ptr<std::function<void()>>(poll)]() {
    const bool gone = std::all_of(ending.begin(), ending.end(), [](const std::weak_ptr<Worker>& w) {
      auto alive = w.lock();
      return !alive || alive->state() == WorkerState::dead;
    });
    if ((*in_flight == 0 && (gone || clock_.now() > deadline)) || stopped_) {
      plan(job);
      return;
    }
    round_alarm_->set(kStepPoll, [poll = self.lock()] { (*poll)(); });
  };
  (*poll)();
}

void AdmissionDriver::answer(const std::shared_ptr<Admission>& job,
                             const memory::AdmissionPlan& plan) {
  const bool granted = plan.outcome == memory::AdmissionOutcome::grant;
  const auto outcome = granted ? job->made_room : memory::AdmissionOutcome::refuse;
  const double waited = std::chrono::duration<double>(clock_.now() - job->asked_at).count();
  std::string explanation = plan.explain();
  if (!job->note.empty()) explanation += " (" + job->note + ")";
  std::string done;
  for (const auto& step : job->steps_done) done += (done.empty() ? "" : ", ") + step;
  for (const auto& [env, why] : job->not_hibernated)
    explanation += "; could not hibernate '" + env + "': " + why;
  for (const auto& [env, why] : job->not_slept)
    explanation += "; could not sleep '" + env + "': " + why;
  const auto purpose = job->wake ? " for its wake" : "";
  if (granted) {
    spdlog::info("admission granted {} MiB on GPU {} to '{}'{}{} in {:.3f} s: {}",
                 to_mib(job->bytes), job->device, job->env, purpose,
                 done.empty() ? "" : " after it " + done, waited, explanation);
  } else {
    steps_.note_refusal(job->env);
    spdlog::warn("admission refused {} MiB on GPU {} to '{}'{}{}: {}", to_mib(job->bytes),
                 job->device, job->env, purpose, done.empty() ? "" : " though it " + done,
                 explanation);
  }
  job->answer(
      {{"granted", granted},
       {"outcome", memory::to_string(outcome)},
       {"grant", plan.grant_id ? nlohmann::ordered_json(*plan.grant_id) : nlohmann::ordered_json()},
       {"bytes", job->bytes},
       {"device", job->device},
       {"free", plan.free},
       {"reserve", plan.reserve},
       {"pending", plan.pending},
       {"foreign", plan.foreign},
       {"grantable", plan.grantable},
       {"steps", job->steps_done},
       {"not_hibernated", job->not_hibernated},
       {"not_slept", job->not_slept},
       {"plans", job->plans},
       {"waited_seconds", waited},
       {"explanation", explanation}});
  deciding_ = false;
  asio::post(io_, [this] { next(); });
}

}  // namespace isohost::pool
