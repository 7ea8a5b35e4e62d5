// The pool's side of admission (admission_driver.hpp decides): requests for VRAM taken from
// workers and from the embedding host, and the steps the driver asks of idle workers.
// docs/memory.md tells the story; memory/admission.hpp the arithmetic.

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "pool/pool.hpp"

namespace isohost::pool {
namespace {

using worker::Worker;
using worker::WorkerState;

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

// A JSON integer of 0 or more, stored signed or unsigned.
bool whole(const nlohmann::ordered_json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
}

bool device_index(const nlohmann::ordered_json& v) {
  return whole(v) && v.get<std::uint64_t>() <= kMaxDevice;  // pool/config.hpp
}

}  // namespace

void Pool::on_worker_request(Slot& slot, const std::shared_ptr<Worker>& w,
                             const nlohmann::ordered_json& request,
                             std::function<void(nlohmann::ordered_json)> answer) {
  const auto op = request.value("op", std::string());
  if (op == "tell") {  // the worker's own, between calls
    if (options_.on_tell) {
      options_.on_tell(slot.config.name, request);
    } else {
      spdlog::warn("worker '{}': a tell was dropped: no call is in flight to ask",
                   slot.config.name);
    }
    return;
  }
  if (op == "ask") {  // the worker's own, between calls
    if (options_.on_ask) {
      options_.on_ask(slot.config.name, request, on_loop(std::move(answer)));
    } else {
      answer(worker::failed_answer(
          "Unsupported",
          "no call is in flight to ask, and this host serves no asks between calls"));
    }
    return;
  }
  if (op == "reserve_done") {
    const auto grant = request.value("grant", nlohmann::ordered_json());
    if (grant.is_number_unsigned() && admission_.grants().settle(grant.get<memory::GrantId>())) {
      spdlog::debug("worker '{}' settled grant {}", slot.config.name, grant.dump());
    }
    return;
  }
  const auto bytes = request.value("bytes", nlohmann::ordered_json());
  const auto device = request.value("device", nlohmann::ordered_json());
  if (!whole(bytes) || (!device.is_null() && !device_index(device))) {
    answer(
        {{"granted", false},
         {"outcome", "refuse"},
         {"explanation",
          "reserve_vram needs a whole number of bytes and a GPU index from 0 to 255, got bytes " +
              bytes.dump() + " and device " + device.dump()}});
    return;
  }
  auto job = std::make_shared<Admission>(Admission{
      .env = slot.config.name,
      .requester = w,
      .device = device.is_null() ? slot.config.device.value_or(0)
                                 : static_cast<unsigned>(device.get<std::uint64_t>()),
      .bytes = bytes.get<std::uint64_t>(),
      .asked_at = clock().now(),
      .answer = std::move(answer),
  });
  admission_.ask(std::move(job));
}

void Pool::make_room_for_host(const nlohmann::ordered_json& message, Handler handler) {
  const auto bytes = message.value("bytes", nlohmann::ordered_json());
  const auto device = message.value("device", nlohmann::ordered_json(0));
  if (!whole(bytes)) {
    handler(Outcome::failure(Error(
        ErrorKind::bad_request, "make_room needs a whole number of bytes, not " + bytes.dump())));
    return;
  }
  if (!device_index(device)) {
    handler(
        Outcome::failure(Error(ErrorKind::bad_request,
                               "make_room needs a GPU index from 0 to 255, not " + device.dump())));
    return;
  }
  // The caller hears exactly once: the admission's answer, or, if the admission is dropped
  // unanswered (the pool shut down meanwhile), a refusal when the last copy of it goes.
  struct AnswerOnce {
    Handler handler;
    void operator()(nlohmann::ordered_json answer) {
      std::exchange(handler, nullptr)(Outcome::success(std::move(answer)));
    }
    ~AnswerOnce() {
      if (handler)
        handler(Outcome::failure(Error(ErrorKind::shutting_down, "the host is shutting down")));
    }
  };
  auto once = std::make_shared<AnswerOnce>();
  once->handler = std::move(handler);
  admission_.ask(std::make_shared<Admission>(Admission{
      .env = "the host",
      .for_host = true,
      .device = static_cast<unsigned>(device.get<std::uint64_t>()),
      .bytes = bytes.get<std::uint64_t>(),
      .asked_at = clock().now(),
      .answer = [once](nlohmann::ordered_json answer) { (*once)(std::move(answer)); },
  }));
}

void Pool::measure(std::function<void(PoolStatus)> done) {
  status_with_memory_on_loop(std::move(done), Reports::cached_while_busy,
                             MemorySampler::RamReading::from_counters);
}

AdmissionSteps::Begun Pool::begin_step(const memory::AdmissionStep& step,
                                       const std::string& for_env, const std::string& why,
                                       StepDone done) {
  auto it = slots_.find(step.worker_id);
  if (it == slots_.end()) return {};
  Slot& slot = it->second;
  // The plan was made from a snapshot; a worker that has since started a call is left alone.
  if (slot.state != EnvState::running || !can_take(step.kind, slot.worker->state())) return {};
  if (slot.worker->pid() != step.pid || !slot.queue.empty()) return {};
  if (step.kind == memory::StepKind::reap && slot.kept) return {};  // kept since the snapshot
  const auto why_not = [](const Outcome& outcome, const char* otherwise) {
    return outcome.ok() ? outcome.value().value("reason", std::string(otherwise))
                        : std::string(outcome.error().what());
  };
  switch (step.kind) {
    case memory::StepKind::release:
      note_admission_step(slot, "released", for_env);
      release(slot, why, [done] { done(true, {}); });
      return {.begun = true};
    case memory::StepKind::sleep:
      put_to_sleep(slot, [this, &slot, for_env, done, why_not](Outcome outcome) {
        const bool slept = outcome.ok() && outcome.value().value("asleep", false);
        if (slept) note_admission_step(slot, "slept", for_env);
        done(slept, slept ? std::string() : why_not(outcome, "did not sleep"));
        pump(slot);
      });
      return {.begun = true};
    case memory::StepKind::hibernate:
      hibernate_on_loop(step.worker_id, [this, &slot, for_env, done, why_not](Outcome outcome) {
        const bool hibernated = outcome.ok() && outcome.value().value("hibernated", false);
        if (hibernated) note_admission_step(slot, "hibernated", for_env);
        done(hibernated, hibernated ? std::string() : why_not(outcome, "not hibernated"));
      });
      return {.begun = true};
    case memory::StepKind::reap: {
      note_admission_step(slot, "reaped", for_env);
      std::weak_ptr<Worker> ending = slot.worker;
      retire(slot, "reaped for " + why);
      return {.begun = true, .ending = std::move(ending)};
    }
  }
  return {};
}

void Pool::note_refusal(const std::string& env) {
  if (auto it = slots_.find(env); it != slots_.end()) ++it->second.metrics.refusals;
}

void Pool::note_admission_step(Slot& slot, const char* action, const std::string& for_env) {
  slot.metrics.last_admission =
      AdmissionAction{.action = action, .for_env = for_env, .at = Clock::now()};
}

}  // namespace isohost::pool
