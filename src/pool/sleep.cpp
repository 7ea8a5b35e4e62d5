// The pool's side of sleep (docs/sleep.md): the worker moves its own torch storages into its
// host RAM through a pinned staging area and frees them, so its VRAM falls to its context; the
// pool asks, keeps the receipt for ps and the admission of the wake, and sends `wake` before
// the next call once admission has found room for what it moved.

#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "pool/pool.hpp"
#include "pool/transfer_rate.hpp"

namespace isohost::pool {
namespace {

using worker::Worker;
using worker::WorkerState;

// A figure of the worker's receipt; the receipt is input, never trusted to be well formed.
template <typename T>
T receipt_figure(const nlohmann::ordered_json& receipt, const char* key, T fallback) {
  const auto value =
      receipt.is_object() ? receipt.value(key, nlohmann::ordered_json()) : nlohmann::ordered_json();
  if (!value.is_number()) return fallback;
  const auto number = value.get<double>();
  return number >= 0 ? static_cast<T>(number) : fallback;
}

// " into new memory" and the like: where the receipt says the copy went (a buffer mapped for
// this sleep, the last wake's, or one the worker faulted in while idle); only those words.
std::string into_which_buffer(const nlohmann::ordered_json& receipt) {
  const auto which = receipt.value("host_buffer", nlohmann::ordered_json());
  if (!which.is_string()) return "";
  const auto name = which.get<std::string>();
  if (name != "new" && name != "kept" && name != "prepared") return "";
  return " into " + name + " memory";
}

}  // namespace

nlohmann::ordered_json Sleep::to_json() const {
  return {{"bytes", bytes},
          {"storages", storages},
          {"left_on_card", left_on_card},
          {"seconds", seconds},
          {"for_seconds", std::chrono::duration<double>(Worker::Clock::now() - since).count()}};
}

bool offers_sleep(const nlohmann::ordered_json& hello) {
  // A hello is input, not trusted.
  if (!hello.is_object()) return false;
  const auto capabilities = hello.value("capabilities", nlohmann::ordered_json());
  if (!capabilities.is_array()) return false;
  for (const auto& c : capabilities) {
    if (c == "sleep") return true;
  }
  return false;
}

void Pool::put_to_sleep(Slot& slot, Handler done) {
  auto w = slot.worker;
  if (!offers_sleep(w->hello())) {
    done(Outcome::success(
        {{"asleep", false},
         {"reason", w->identity() + "'s runtime has no sleep (an older isohost_worker)"}}));
    return;
  }
  const auto sent = Clock::now();
  w->request({{"op", "sleep"}}, config_.host.shutdown_grace + call_timeout(slot), "sleep",
             [this, &slot, w, sent, done = std::move(done)](Outcome outcome) {
               if (slot.worker != w || w->state() != WorkerState::ready) {
                 done(outcome.ok()
                          ? Outcome::success({{"asleep", false},
                                              {"reason", w->identity() + " ended while it slept"}})
                          : std::move(outcome));
                 return;
               }
               if (!outcome.ok()) {
                 spdlog::warn("{} could not sleep: {}", w->identity(), outcome.error().what());
                 check_asleep_after_failure(slot, w, std::move(outcome), std::move(done));
                 return;
               }
               const auto& receipt = outcome.value();
               if (!receipt.is_object() || !receipt.value("asleep", false)) {
                 done(std::move(outcome));
                 return;
               }
               Sleep record{.since = Clock::now(),
                            .bytes = receipt_figure<std::uint64_t>(receipt, "bytes", 0),
                            .storages = receipt_figure<std::uint64_t>(receipt, "storages", 0),
                            .seconds = receipt_figure<double>(receipt, "seconds", 0)};
               const auto left = receipt.value("left_on_card", nlohmann::ordered_json());
               record.left_on_card = receipt_figure<std::uint64_t>(left, "bytes", 0);
               w->mark_asleep();
               slot.sleep = record;
               ++slot.metrics.sleeps;
               slot.metrics.sleep_seconds.observe(
                   std::chrono::duration<double>(Clock::now() - sent).count());
               fold_transfer(measured_rates_.sleep_out, record.bytes, record.seconds);
               spdlog::info(
                   "{} is asleep: {:.0f} MiB in {} storages moved into its host RAM in {:.3f} s "
                   "(found in {:.3f}, copied in {:.3f}{}, freed in {:.3f}; {:.0f} MiB left on the "
                   "card)",
                   w->identity(), static_cast<double>(record.bytes) / 1048576.0, record.storages,
                   record.seconds, receipt_figure<double>(receipt, "find_seconds", 0),
                   receipt_figure<double>(receipt, "copy_seconds", 0), into_which_buffer(receipt),
                   receipt_figure<double>(receipt, "free_seconds", 0),
                   static_cast<double>(record.left_on_card) / 1048576.0);
               done(std::move(outcome));
             });
}

void Pool::check_asleep_after_failure(Slot& slot, const std::shared_ptr<Worker>& w,
                                      Outcome failure, Handler done) {
  // The worker's sleep is all or nothing, but for one case: freeing failed half-way and putting
  // the freed storages back failed too. Then it is asleep, its bytes in its host RAM, and its
  // report says so; its wake must go through admission like any other.
  w->query("memory", [this, &slot, w, failure = std::move(failure),
                      done = std::move(done)](Outcome report) mutable {
    const auto asleep = report.ok() && report.value().is_object()
                            ? report.value().value("asleep", nlohmann::ordered_json())
                            : nlohmann::ordered_json();
    if (slot.worker == w && w->state() == WorkerState::ready && asleep.is_object()) {
      slot.sleep = Sleep{.since = Clock::now(),
                         .bytes = receipt_figure<std::uint64_t>(asleep, "bytes", 0),
                         .storages = receipt_figure<std::uint64_t>(asleep, "storages", 0)};
      w->mark_asleep();
      spdlog::warn("{} is asleep after its failed sleep: {} bytes in its host RAM", w->identity(),
                   slot.sleep->bytes);
    }
    done(std::move(failure));
  });
}

void Pool::wake_from_sleep(Slot& slot, const std::shared_ptr<Worker>& w,
                           std::optional<memory::GrantId> grant, Handler done) {
  const auto sent = Clock::now();
  w->mark_awake();  // asleep -> ready, so that the `wake` request can go out on the main lane
  w->request({{"op", "wake"}}, config_.host.shutdown_grace + call_timeout(slot), "wake",
             [this, &slot, w, sent, grant, done = std::move(done)](Outcome outcome) {
               // The VRAM is the worker's own again, or the worker gave up on it: no longer a
               // promise.
               if (grant) admission_.grants().settle(*grant);
               if (slot.worker != w || w->state() != WorkerState::ready) {
                 // Died during the wake: its exit failed or will fail whatever waits in the queue.
                 if (done)
                   done(outcome.ok()
                            ? Outcome::failure(Error(ErrorKind::wake_failed,
                                                     w->identity() + " ended while it woke"))
                            : std::move(outcome));
                 return;
               }
               if (!outcome.ok()) {
                 // The worker's wake is all or nothing too: its models are still in its host RAM.
                 w->mark_asleep();
                 fail_wake(slot,
                           Error(ErrorKind::wake_failed,
                                 w->identity() + " could not wake: " + outcome.error().what() +
                                     "; it stays asleep, its models intact in its host RAM",
                                 outcome.error().detail()),
                           std::move(done));
                 pump(slot);
                 return;
               }
               const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
               const auto bytes = slot.sleep ? slot.sleep->bytes : 0;
               fold_transfer(measured_rates_.sleep_in, bytes,
                             receipt_figure<double>(outcome.value(), "seconds", seconds));
               slot.sleep.reset();
               ++slot.metrics.wakes;
               slot.metrics.wake_seconds.observe(seconds);
               spdlog::info("{} woke: {:.0f} MiB back on the card in {:.3f} s", w->identity(),
                            static_cast<double>(bytes) / 1048576.0, seconds);
               if (done) {
                 done(Outcome::success(
                     {{"woken", true},
                      {"from", "sleep"},
                      {"pid", w->pid()},
                      {"generation", w->generation()},
                      {"vram_restored", bytes},
                      {"seconds", seconds},
                      {"grow_seconds", receipt_figure<double>(outcome.value(), "grow_seconds", 0)},
                      {"copy_seconds",
                       receipt_figure<double>(outcome.value(), "copy_seconds", 0)}}));
               }
               pump(slot);
             });
}

void Pool::sleep_idle(Slot& slot) {
  slot.idle->step = std::max(slot.idle->step, IdleStep::slept);
  const auto name = slot.config.name;
  // Through the queue, as a release: a call that came meanwhile goes first.
  slot.queue.push_back(Pending{Request{Request::Kind::sleep, name}, [name](Outcome outcome) {
                                 if (!outcome.ok()) return;  // logged where it failed
                                 if (!outcome.value().value("asleep", false)) {
                                   spdlog::info("idle sleep of '{}' skipped: {}", name,
                                                outcome.value().value("reason", std::string()));
                                 }
                               }});
  pump(slot);
}

}  // namespace isohost::pool
