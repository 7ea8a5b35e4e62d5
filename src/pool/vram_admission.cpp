// The pool's admission driver: a worker's reserve_vram is decided on the loop, one request at a
// time, from fresh books (memory::plan_admission); the pool carries out the plan's steps
// (release, reap), lets the driver's figures catch up, and plans again until the request is
// granted or refused. docs/memory.md tells the story; memory/admission.hpp the arithmetic.

#include <algorithm>
#include <utility>

#include <asio/post.hpp>
#include <spdlog/spdlog.h>

#include "memory/admission.hpp"
#include "memory/ledger.hpp"
#include "pool/pool.hpp"

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
// Rounds of steps (each of one kind: release, hibernate, reap) before a request that is still
// short is refused.
constexpr int kMaxRounds = 6;

std::uint64_t to_mib(std::uint64_t bytes) { return bytes >> 20; }

// Whether a worker in `state` can take `step` now: one that started a call since the plan was
// made is left alone.
bool can_take(memory::StepKind step, WorkerState state) {
  switch (step) {
    case memory::StepKind::release:
    case memory::StepKind::sleep:
      return state == WorkerState::ready;
    case memory::StepKind::hibernate:
      return state == WorkerState::ready || state == WorkerState::asleep;
    case memory::StepKind::reap:
      return state == WorkerState::ready || state == WorkerState::asleep ||
             state == WorkerState::hibernated;
  }
  return false;
}

}  // namespace

void Pool::on_worker_request(Slot& slot, const std::shared_ptr<Worker>& w, const nlohmann::json& request,
                             std::function<void(nlohmann::json)> answer) {
  const auto op = request.value("op", std::string());
  if (op == "reserve_done") {
    const auto grant = request.value("grant", nlohmann::json());
    if (grant.is_number_unsigned() && grants_.settle(grant.get<memory::GrantId>())) {
      spdlog::debug("worker '{}' settled grant {}", slot.config.name, grant.dump());
    }
    return;
  }
  const auto bytes = request.value("bytes", nlohmann::json());
  const auto device = request.value("device", nlohmann::json());
  if (!bytes.is_number_unsigned() || (!device.is_null() && !device.is_number_unsigned())) {
    answer({{"granted", false},
            {"outcome", "refuse"},
            {"explanation", "reserve_vram needs a whole number of bytes and a GPU index, got bytes " +
                                bytes.dump() + " and device " + device.dump()}});
    return;
  }
  auto job = std::make_shared<Admission>(Admission{
      .env = slot.config.name,
      .requester = w,
      .device = device.is_null() ? slot.config.device.value_or(0) : device.get<unsigned>(),
      .bytes = bytes.get<std::uint64_t>(),
      .asked_at = Clock::now(),
      .answer = std::move(answer),
  });
  queue_admission(std::move(job));
}

void Pool::make_room_for_host(const nlohmann::json& message, Handler handler) {
  const auto bytes = message.value("bytes", nlohmann::json());
  const auto device = message.value("device", nlohmann::json(0));
  const auto whole = [](const nlohmann::json& v) {
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
  };
  if (!whole(bytes) || !whole(device)) {
    handler(Outcome::failure(Error(ErrorKind::bad_request,
                                   "make_room needs a whole number of bytes and a GPU index, "
                                   "got bytes " +
                                       bytes.dump() + " and device " + device.dump())));
    return;
  }
  // The caller hears exactly once: the admission's answer, or, if the admission is dropped
  // unanswered (the pool shut down meanwhile), a refusal when the last copy of it goes.
  struct AnswerOnce {
    Handler handler;
    void operator()(nlohmann::json answer) {
      std::exchange(handler, nullptr)(Outcome::success(std::move(answer)));
    }
    ~AnswerOnce() {
      if (handler)
        handler(Outcome::failure(Error(ErrorKind::shutting_down, "the host is shutting down")));
    }
  };
  auto once = std::make_shared<AnswerOnce>();
  once->handler = std::move(handler);
  queue_admission(std::make_shared<Admission>(Admission{
      .env = "the host",
      .for_host = true,
      .device = device.get<unsigned>(),
      .bytes = bytes.get<std::uint64_t>(),
      .asked_at = Clock::now(),
      .answer = [once](nlohmann::json answer) { (*once)(std::move(answer)); },
  }));
}

void Pool::queue_admission(std::shared_ptr<Admission> job) {
  admissions_.push_back(std::move(job));
  next_admission();
}

void Pool::next_admission() {
  if (admission_running_ || admissions_.empty() || shutting_down_) return;
  admission_running_ = true;
  auto job = std::move(admissions_.front());
  admissions_.pop_front();
  plan_admission(std::move(job));
}

void Pool::plan_admission(std::shared_ptr<Admission> job) {
  expire_grants();
  status_with_memory_on_loop([this, job = std::move(job)](PoolStatus status) { decide(job, status); });
}

void Pool::expire_grants() {
  for (const auto& g : grants_.expire(Clock::now(), config_.host.grant_lifetime)) {
    spdlog::info("grant {} of {} MiB on GPU {} to '{}' expired unused; its bytes are free again", g.id,
                 to_mib(g.bytes), g.device, g.requester);
  }
}

void Pool::decide(const std::shared_ptr<Admission>& job, const PoolStatus& status) {
  const auto requester = job->requester.lock();
  const bool requester_gone =
      !job->for_host && (!requester || requester->state() == WorkerState::dead ||
                         requester->state() == WorkerState::stopping);
  if (shutting_down_ || requester_gone) {
    // Nobody left to answer; the next request goes ahead.
    admission_running_ = false;
    next_admission();
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
  auto plan = memory::plan_admission(memory::build_ledger(snapshot, grants_.outstanding()), request);
  const bool needs_steps = plan.grants() && plan.outcome != memory::AdmissionOutcome::grant;
  if (needs_steps && job->reaped_last_round && job->settle_polls < kSettlePolls) {
    ++job->settle_polls;
    admission_timer_.expires_after(kSettlePoll);
    admission_timer_.async_wait([this, job](const asio::error_code& ec) {
      if (!ec) plan_admission(job);
    });
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
      plan.grant_id = grants_.add(job->env, request.device, request.bytes, Clock::now());
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
  answer_admission(job, plan);
}

void Pool::set_aside(const std::shared_ptr<Admission>& job) {
  waiting_admissions_.push_back(job);
  admission_running_ = false;
  if (waiting_admissions_.size() == 1) {
    // One poll for all that wait: each is planned again, first in the line, in its turn.
    waiting_timer_.expires_after(kWaitPoll);
    waiting_timer_.async_wait([this](const asio::error_code& ec) {
      if (ec || shutting_down_) return;
      auto waiting = std::exchange(waiting_admissions_, {});
      admissions_.insert(admissions_.begin(), waiting.begin(), waiting.end());
      next_admission();
    });
  }
  asio::post(io_, [this] { next_admission(); });
}

void Pool::make_room(const std::shared_ptr<Admission>& job, const memory::AdmissionPlan& plan) {
  ++job->rounds;
  job->settle_polls = 0;
  // Only the cheapest kind of step in the plan is carried out before planning again: a release
  // may give back more than the worker's report promised (its own caches), and then no
  // hibernation or reap is needed at all.
  const auto kind = std::min_element(plan.steps.begin(), plan.steps.end(), [](const auto& a, const auto& b) {
                      return a.kind < b.kind;
                    })->kind;
  job->reaped_last_round = kind == memory::StepKind::reap;
  job->plans.push_back(plan.explain());
  spdlog::info("admission for '{}' makes room ({} first): {}", job->env, memory::to_string(kind),
               job->plans.back());
  // Releases and hibernations in flight.
  auto releases = std::make_shared<std::size_t>(0);
  std::vector<std::weak_ptr<Worker>> reaped;
  for (const auto& step : plan.steps) {
    if (step.kind != kind) continue;
    auto it = slots_.find(step.worker_id);
    if (it == slots_.end()) continue;
    Slot& slot = it->second;
    // The plan was made from a snapshot; a worker that has since started a call is left alone.
    if (slot.state != EnvState::running || !can_take(step.kind, slot.worker->state())) continue;
    if (slot.worker->pid() != step.pid || !slot.queue.empty()) continue;
    const auto why = fmt::format("admission for '{}' ({} MiB on GPU {})", job->env, to_mib(job->bytes), job->device);
    switch (step.kind) {
      case memory::StepKind::release:
        note_admission_step(slot, "released", job->env);
        ++*releases;
        job->steps_done.push_back("released '" + step.worker_id + "'");
        job->made_room = std::max(job->made_room, memory::AdmissionOutcome::release_then_grant);
        release(slot, why, [releases] { --*releases; });
        break;
      case memory::StepKind::sleep:
        ++*releases;
        put_to_sleep(slot, [this, job, releases, &slot, env = step.worker_id](Outcome outcome) {
          --*releases;
          if (outcome.ok() && outcome.value().value("asleep", false)) {
            note_admission_step(slot, "slept", job->env);
            job->steps_done.push_back("slept '" + env + "'");
            job->made_room = std::max(job->made_room, memory::AdmissionOutcome::sleep_then_grant);
          } else {
            job->not_slept[env] =
                outcome.ok() ? outcome.value().value("reason", std::string("did not sleep"))
                             : outcome.error().what();
          }
          pump(slot);
        });
        break;
      case memory::StepKind::reap:
        note_admission_step(slot, "reaped", job->env);
        job->steps_done.push_back("reaped '" + step.worker_id + "'");
        job->made_room = std::max(job->made_room, memory::AdmissionOutcome::reap_then_grant);
        reaped.push_back(slot.worker);
        retire(slot, "reaped for " + why);
        break;
      case memory::StepKind::hibernate:
        ++*releases;
        hibernate_on_loop(step.worker_id, [this, job, releases,
                                           env = step.worker_id](Outcome outcome) {
          --*releases;
          if (outcome.ok() && outcome.value().value("hibernated", false)) {
            note_admission_step(slots_.at(env), "hibernated", job->env);
            job->steps_done.push_back("hibernated '" + env + "'");
            job->made_room = std::max(job->made_room, memory::AdmissionOutcome::hibernate_then_grant);
          } else {
            job->not_hibernated[env] =
                outcome.ok() ? outcome.value().value("reason", std::string("not hibernated")) : outcome.error().what();
          }
        });
        break;
    }
  }
  // Plan again once every release and hibernation has answered (each always does: a release
  // is bounded by the call timeout, a hibernation by the driver; 10 GiB takes some 5 s) and
  // every reaped worker is gone, which its shutdown grace bounds.
  const auto deadline = Clock::now() + config_.host.shutdown_grace + std::chrono::seconds(2);
  // The poll holds itself only weakly (a strong self-capture would be a cycle that never frees);
  // the pending timer's handler keeps it alive between polls.
  auto poll = std::make_shared<std::function<void()>>();
  *poll = [this, job, releases, reaped = std::move(reaped), deadline,
           self = std::weak_ptr<std::function<void()>>(poll)]() {
    const bool gone = std::all_of(reaped.begin(), reaped.end(), [](const std::weak_ptr<Worker>& w) {
      auto alive = w.lock();
      return !alive || alive->state() == WorkerState::dead;
    });
    if ((*releases == 0 && (gone || Clock::now() > deadline)) || shutting_down_) {
      plan_admission(job);
      return;
    }
    admission_timer_.expires_after(std::chrono::milliseconds(10));
    admission_timer_.async_wait([poll = self.lock()](const asio::error_code& ec) {
      if (!ec && poll) (*poll)();
    });
  };
  (*poll)();
}

void Pool::note_admission_step(Slot& slot, const char* action, const std::string& for_env) {
  slot.metrics.last_admission =
      AdmissionAction{.action = action, .for_env = for_env, .at = Clock::now()};
}

void Pool::answer_admission(const std::shared_ptr<Admission>& job, const memory::AdmissionPlan& plan) {
  const bool granted = plan.outcome == memory::AdmissionOutcome::grant;
  const auto outcome = granted ? job->made_room : memory::AdmissionOutcome::refuse;
  const double waited = std::chrono::duration<double>(Clock::now() - job->asked_at).count();
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
    if (auto it = slots_.find(job->env); it != slots_.end()) ++it->second.metrics.refusals;
    spdlog::warn("admission refused {} MiB on GPU {} to '{}'{}{}: {}", to_mib(job->bytes),
                 job->device, job->env, purpose, done.empty() ? "" : " though it " + done,
                 explanation);
  }
  job->answer({{"granted", granted},
               {"outcome", memory::to_string(outcome)},
               {"grant", plan.grant_id ? nlohmann::json(*plan.grant_id) : nlohmann::json()},
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
  admission_running_ = false;
  asio::post(io_, [this] { next_admission(); });
}

}  // namespace isohost::pool
