// The pool's side of hibernation: which worker may be hibernated, the steps around the
// driver's calls (pool/hibernator.hpp), the books and the log. docs/hibernation.md explains.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "pool/pool.hpp"
#include "pool/transfer_rate.hpp"
#include "probe/probe_error.hpp"
#include "probe/proc_status.hpp"

namespace isohost::pool {
namespace {

using worker::Worker;
using worker::WorkerState;

std::optional<std::uint64_t> rss_of(pid_t pid) {
  try {
    return probe::read_rss_counters(pid).rss;
  } catch (const probe::ProbeError&) {
    return std::nullopt;
  }
}

nlohmann::ordered_json optional_bytes(const std::optional<std::uint64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

std::string mib_text(const std::optional<std::uint64_t>& bytes) {
  return bytes ? fmt::format("{:.0f} MiB", static_cast<double>(*bytes) / 1048576.0)
               : "an unknown amount";
}

std::string mb_text(const std::optional<std::uint64_t>& bytes) {
  return bytes ? fmt::format("{:.0f} MB", static_cast<double>(*bytes) / 1e6) : "? MB";
}

nlohmann::ordered_json not_done(const char* key, std::string reason) {
  return {{key, false}, {"reason", std::move(reason)}};
}

}  // namespace

nlohmann::ordered_json Hibernation::to_json() const {
  return {
      {"vram_moved", optional_bytes(vram_moved)},
      {"vram_before", optional_bytes(vram_before)},
      {"ram_grown", optional_bytes(ram_grown)},
      {"seconds", seconds},
      {"for_seconds", std::chrono::duration<double>(worker::Worker::Clock::now() - since).count()},
      {"driver_only_because", driver_only_because.empty()
                                  ? nlohmann::ordered_json()
                                  : nlohmann::ordered_json(driver_only_because)}};
}

Hibernator& Pool::hibernator() {
  if (!hibernator_) {
    hibernator_ = std::make_unique<Hibernator>(
        io(), HibernatorOptions{.library = options_.cuda_library,
                                .lock_timeout = options_.hibernate_lock_timeout});
  }
  return *hibernator_;
}

void Pool::hibernate_on_loop(const std::string& env, Handler done) {
  submit_on_loop(Request{Request::Kind::hibernate, env}, std::move(done));
}

std::optional<std::string> Pool::cannot_hibernate(const Slot& slot) const {
  const auto& w = *slot.worker;
  if (!slot.config.hibernate) {
    return "environment '" + slot.config.name + "' has hibernate = false";
  }
  if (w.state() != WorkerState::ready && w.state() != WorkerState::asleep) {
    return w.identity() + " is " + worker::worker_state_name(w.state()) + ", not idle";
  }
  if (slot.state == EnvState::admitting_wake)
    return w.identity() + " is waiting for room on the card to wake";
  if (!slot.queue.empty()) return w.identity() + " has requests waiting";
  return std::nullopt;
}

void Pool::back_to_idle(Slot& slot, const std::shared_ptr<Worker>& w) {
  w->mark_awake();
  if (slot.sleep) w->mark_asleep();
  w->query("woken", [](Outcome) {});
}

void Pool::begin_hibernation(Slot& slot, Handler done) {
  auto w = slot.worker;
  if (w->state() == WorkerState::hibernated) {
    done(Outcome::success({{"hibernated", true},
                           {"already", true},
                           {"pid", w->pid()},
                           {"generation", w->generation()}}));
    return;
  }
  if (auto why = cannot_hibernate(slot)) {
    done(Outcome::success(not_done("hibernated", *why)));
    return;
  }
  slot.idle->cancel_timers();
  if (w->state() == WorkerState::asleep) {
    checkpoint(slot, Hibernation{.since = Clock::now()}, std::move(done));
    return;
  }
  // The worker moves its models itself at the bus's speed; the driver then moves only what is
  // left (its context), which it does at a fraction of the speed.
  put_to_sleep(slot, [this, &slot, w, done = std::move(done)](Outcome slept) mutable {
    if (slot.worker != w ||
        (w->state() != WorkerState::ready && w->state() != WorkerState::asleep)) {
      done(Outcome::success(
          not_done("hibernated", w->identity() + " ended before it could be hibernated")));
      return;
    }
    if (!slot.queue.empty()) {
      done(Outcome::success(
          not_done("hibernated",
                   w->identity() + " was asked for work while it slept; it serves that instead")));
      pump(slot);
      return;
    }
    Hibernation record{.since = Clock::now()};
    if (w->state() != WorkerState::asleep) {
      record.driver_only_because =
          slept.ok() ? slept.value().value("reason", std::string("it did not sleep"))
                     : std::string("its sleep failed: ") + slept.error().what();
      spdlog::info("{} did not sleep ({}); the driver moves its models too", w->identity(),
                   record.driver_only_because);
    }
    checkpoint(slot, std::move(record), std::move(done));
  });
}

void Pool::checkpoint(Slot& slot, Hibernation record, Handler done) {
  auto w = slot.worker;
  w->mark_hibernating();
  // The worker's report, taken before the lock; from here it answers `memory` from that copy.
  w->query("hibernating", [this, &slot, w, record, done = std::move(done)](Outcome report) mutable {
    if (slot.worker != w || w->state() != WorkerState::hibernating) {
      done(Outcome::success(
          not_done("hibernated", w->identity() + " ended before it could be hibernated")));
      return;
    }
    const bool cuda = report.ok() && report.value().is_object() &&
                      report.value().value("cuda_initialized", false);
    sampling_.run<std::vector<ProcessMemory>>(
        [pid = w->pid(), cuda](MemorySampler& sampler) {
          return sampler.sample({{pid, cuda}});
        },
        [this, &slot, w, cuda, record,
         done = std::move(done)](std::vector<ProcessMemory> sample) mutable {
          if (slot.worker != w || w->state() != WorkerState::hibernating) {
            done(Outcome::success(
                not_done("hibernated", w->identity() + " ended before it could be hibernated")));
            return;
          }
          if (sample.empty()) sample.emplace_back();  // the sampling failed: nothing seen
          lock_and_checkpoint(slot, w, cuda, sample[0], std::move(record), std::move(done));
        });
  });
}

void Pool::lock_and_checkpoint(Slot& slot, const std::shared_ptr<Worker>& w, bool cuda,
                               const ProcessMemory& sample, Hibernation record, Handler done) {
  // NVML sees any CUDA user, torch or not; the report sees torch in any pid namespace.
  if (!cuda && sample.vram_method != "nvml") {
    back_to_idle(slot, w);
    done(Outcome::success(not_done(
        "hibernated", w->identity() + " has no CUDA context: nothing to move off the card")));
    pump(slot);
    return;
  }
  record.vram_moved = sample.vram;
  const auto rss_before = rss_of(w->pid());
  hibernator().hibernate(w->pid(), [this, &slot, w, record, rss_before,
                                    done = std::move(done)](DriverOutcome outcome) mutable {
    const auto rss_after = rss_of(w->pid());
    if (rss_before && rss_after)
      record.ram_grown = *rss_after > *rss_before ? *rss_after - *rss_before : 0;
    finish_hibernation(slot, w, record, std::move(outcome), std::move(done));
  });
}

void Pool::finish_hibernation(Slot& slot, const std::shared_ptr<Worker>& w, Hibernation record,
                              DriverOutcome outcome, Handler done) {
  if (slot.worker != w || w->state() != WorkerState::hibernating) {
    // Killed meanwhile (shutdown, reap, crash): its exit has been handled.
    done(Outcome::success(
        not_done("hibernated", w->identity() + " ended while it was being hibernated")));
    return;
  }
  using Kind = DriverOutcome::Kind;
  if (outcome.kind == Kind::failed) {
    Error error(ErrorKind::hibernate_failed, w->identity() + " could not be hibernated: " +
                                                 outcome.message + "; it was retired");
    spdlog::error("{}", error.what());
    w->kill(error);
    done(Outcome::failure(error));
    return;
  }
  if (outcome.kind != Kind::done) {
    back_to_idle(slot, w);
    spdlog::info("{} was not hibernated: {}", w->identity(), outcome.message);
    done(Outcome::success(
        not_done("hibernated", w->identity() + " was not hibernated: " + outcome.message)));
    pump(slot);
    return;
  }
  w->mark_hibernated();
  record.seconds = outcome.seconds;
  // The sleep's mapping is the worker's RSS too, grown before the driver's part was measured.
  const std::uint64_t slept = slot.sleep ? slot.sleep->bytes : 0;
  if (record.vram_moved) record.vram_before = *record.vram_moved + slept;
  if (record.ram_grown) *record.ram_grown += slept;
  if (record.vram_moved)
    fold_transfer(measured_rates_.driver_out, *record.vram_moved, outcome.seconds);
  ++slot.metrics.hibernations;
  slot.metrics.hibernate_seconds.observe(outcome.seconds);
  slot.hibernation = record;
  spdlog::info(
      "hibernated {}: {} of VRAM moved into its host RAM (RSS +{}) in {:.3f} s (lock {:.1f} ms, "
      "checkpoint {:.0f} ms)",
      w->identity(), mib_text(record.vram_moved), mb_text(record.ram_grown), outcome.seconds,
      outcome.first_ms, outcome.second_ms);
  done(Outcome::success({{"hibernated", true},
                         {"pid", w->pid()},
                         {"generation", w->generation()},
                         {"vram_moved", optional_bytes(record.vram_moved)},
                         {"vram_before", optional_bytes(record.vram_before)},
                         {"slept", slot.sleep ? nlohmann::ordered_json(slot.sleep->to_json())
                                              : nlohmann::ordered_json()},
                         {"driver_only_because", record.driver_only_because},
                         {"ram_grown", optional_bytes(record.ram_grown)},
                         {"seconds", outcome.seconds},
                         {"lock_ms", outcome.first_ms},
                         {"checkpoint_ms", outcome.second_ms}}));
  pump(slot);
}

void Pool::begin_wake(Slot& slot, Handler done) {
  auto w = slot.worker;
  if (slot.state == EnvState::admitting_wake) {
    if (done) {
      done(Outcome::success(
          not_done("woken", w->identity() + " is waiting for room on the card to wake")));
    }
    return;
  }
  const bool asleep = w->state() == WorkerState::asleep;
  if (!asleep && w->state() != WorkerState::hibernated) {
    if (done) {
      done(Outcome::success(not_done("woken", w->identity() + " is " +
                                                  worker::worker_state_name(w->state()) +
                                                  ", neither hibernated nor asleep")));
    }
    return;
  }
  // What it moved off must fit again: the card may have filled since. The driver's part is
  // unknown where NVML cannot see the worker; its models, the sleep's figure, never are.
  std::uint64_t moved = slot.sleep ? slot.sleep->bytes : 0;
  if (!asleep && slot.hibernation && slot.hibernation->vram_moved)
    moved += *slot.hibernation->vram_moved;
  const auto resume = [this, &slot, w, asleep](std::optional<memory::GrantId> grant, Handler done) {
    if (asleep) {
      wake_from_sleep(slot, w, grant, std::move(done));
    } else {
      restore(slot, w, grant, std::move(done));
    }
  };
  if (moved == 0) {
    resume(std::nullopt, std::move(done));  // no GPU view, or nothing to put back
    return;
  }
  slot.state = EnvState::admitting_wake;
  admission_.ask(std::make_shared<Admission>(Admission{
      .env = slot.config.name,
      .wake = true,
      .requester = w,
      .device = slot.config.device.value_or(0),
      .bytes = moved,
      .asked_at = clock().now(),
      .answer =
          [this, &slot, w, moved, resume, state = w->state(),
           done = std::move(done)](nlohmann::ordered_json answer) mutable {
            if (slot.worker == w) slot.state = EnvState::running;
            if (slot.worker != w || w->state() != state) {
              // Nothing else acts on a worker waiting to wake, so only its end gets here; its
              // grant, if any, goes back at once.
              const auto grant = answer.value("grant", nlohmann::ordered_json());
              if (grant.is_number_unsigned())
                admission_.grants().settle(grant.get<memory::GrantId>());
              if (done) {
                done(Outcome::success(
                    not_done("woken", w->identity() + " ended before it could be woken")));
              }
              if (slot.worker == w) pump(slot);
              return;
            }
            if (!answer.value("granted", false)) {
              fail_wake(slot,
                        Error(ErrorKind::wake_failed,
                              w->identity() + " could not be woken: no room on the card for the " +
                                  mib_text(moved) + " it moved off (" +
                                  answer.value("explanation", std::string()) + "); it stays " +
                                  worker::worker_state_name(state) + ", its state intact",
                              answer),
                        std::move(done));
              pump(slot);
              return;
            }
            const auto grant = answer.value("grant", nlohmann::ordered_json());
            resume(grant.is_number_unsigned() ? std::optional(grant.get<memory::GrantId>())
                                              : std::nullopt,
                   std::move(done));
          },
  }));
}

void Pool::restore(Slot& slot, const std::shared_ptr<Worker>& w,
                   std::optional<memory::GrantId> grant, Handler done) {
  w->mark_waking();
  const auto rss_before = rss_of(w->pid());
  hibernator().wake(w->pid(), [this, &slot, w, rss_before, grant,
                               done = std::move(done)](DriverOutcome outcome) mutable {
    // The restored VRAM is the worker's own again, no longer a promise; a worker that slept
    // first holds its promise until its models are back too.
    if (grant && !slot.sleep) admission_.grants().settle(*grant);
    const auto models_grant = slot.sleep ? grant : std::nullopt;
    if (slot.worker != w || w->state() != WorkerState::waking) {
      if (done)
        done(
            Outcome::success(not_done("woken", w->identity() + " ended while it was being woken")));
      return;
    }
    finish_wake(slot, w, std::move(outcome), rss_before, models_grant, std::move(done));
  });
}

void Pool::fail_wake(Slot& slot, const Error& error, Handler done) {
  if (done) {
    done(Outcome::failure(error));
  } else if (!slot.queue.empty()) {
    // The request that woke it hears why; those behind it try again.
    auto first = std::move(slot.queue.front());
    slot.queue.pop_front();
    first.request.buffers.close();  // closed before the caller hears
    first.handler(Outcome::failure(error));
  }
}

void Pool::finish_wake(Slot& slot, const std::shared_ptr<Worker>& w, DriverOutcome outcome,
                       std::optional<std::uint64_t> rss_before,
                       std::optional<memory::GrantId> models_grant, Handler done) {
  if (outcome.kind != DriverOutcome::Kind::done) {
    if (models_grant) admission_.grants().settle(*models_grant);
    Error error(ErrorKind::wake_failed,
                w->identity() + " could not be woken: " + outcome.message +
                    "; it was retired and the next call starts a fresh worker");
    spdlog::error("{}", error.what());
    w->kill(error);
    fail_wake(slot, error, std::move(done));  // those behind it get a fresh worker
    return;
  }
  const auto moved = slot.hibernation ? slot.hibernation->vram_moved : std::nullopt;
  const auto rss_after = rss_of(w->pid());
  std::optional<std::uint64_t> ram_freed;
  if (rss_before && rss_after) ram_freed = *rss_before > *rss_after ? *rss_before - *rss_after : 0;
  slot.hibernation.reset();
  fold_transfer(measured_rates_.driver_in, moved.value_or(0), outcome.seconds);
  spdlog::info(
      "woke {}: {} of VRAM restored from its host RAM (RSS -{}) in {:.3f} s (restore {:.0f} ms, "
      "unlock {:.1f} ms)",
      w->identity(), mib_text(moved), mb_text(ram_freed), outcome.seconds, outcome.first_ms,
      outcome.second_ms);
  nlohmann::ordered_json woken{{"woken", true},
                               {"pid", w->pid()},
                               {"generation", w->generation()},
                               {"vram_restored", optional_bytes(moved)},
                               {"seconds", outcome.seconds},
                               {"restore_ms", outcome.first_ms},
                               {"unlock_ms", outcome.second_ms}};
  if (slot.sleep) {
    // The driver gave back its context; the worker puts its models back itself. The grant of
    // this wake covered both; it is settled once the models are back.
    back_to_idle(slot, w);
    wake_from_sleep(slot, w, models_grant,
                    done ? Handler([done, woken](Outcome models) mutable {
                      if (!models.ok()) return done(std::move(models));
                      woken["models"] = models.value();
                      done(Outcome::success(std::move(woken)));
                    })
                         : Handler());
    return;
  }
  w->mark_awake();
  w->query("woken", [](Outcome) {});
  ++slot.metrics.wakes;
  slot.metrics.wake_seconds.observe(outcome.seconds);
  if (done) done(Outcome::success(std::move(woken)));
  pump(slot);
}

void Pool::hibernate_idle(Slot& slot) {
  slot.idle->step = IdleStep::hibernated;
  const auto name = slot.config.name;
  begin_hibernation(slot, [name](Outcome outcome) {
    if (!outcome.ok()) return;  // logged where it failed
    if (!outcome.value().value("hibernated", false)) {
      spdlog::info("idle hibernation of '{}' skipped: {}", name,
                   outcome.value().value("reason", std::string()));
    }
  });
}

}  // namespace isohost::pool
