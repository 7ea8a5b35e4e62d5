#include "pool/pool.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>
#include <asio/post.hpp>

#include "probe/probe_error.hpp"
#include "proc/orphan_sweep.hpp"
#include "worker/runtime_location.hpp"

namespace isohost::pool {

using worker::Worker;
using worker::WorkerState;

Request Request::call(std::string env, std::string target, nlohmann::ordered_json args,
                      nlohmann::ordered_json kwargs) {
  return Request{Kind::call, std::move(env),
                 {{"target", std::move(target)}, {"args", std::move(args)}, {"kwargs", std::move(kwargs)}}};
}

namespace {

// Alive and serving nothing: ready, or resting with its GPU state in its host RAM.
bool is_idle(WorkerState state) {
  return state == WorkerState::ready || state == WorkerState::hibernated ||
         state == WorkerState::asleep;
}

// The environment's variables, with its GPU pinned when it names one: NVML numbers cards in
// PCI bus order, and CUDA does too with CUDA_DEVICE_ORDER=PCI_BUS_ID. Variables the
// environment sets itself win.
std::map<std::string, std::string> worker_environment(const EnvironmentConfig& env) {
  auto vars = env.env;
  if (env.device) {
    vars.try_emplace("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    vars.try_emplace("CUDA_VISIBLE_DEVICES", std::to_string(*env.device));
  }
  return vars;
}

// A pickled call's value and what the caller accepts back (docs/protocol.md, "Values").
void copy_value_fields(const nlohmann::ordered_json& from, nlohmann::ordered_json& to) {
  for (const char* key : {"pickle", "accept"}) {
    if (from.contains(key)) to[key] = from[key];
  }
}

// A caller's JSON value in a message: cut short, and with any bytes that are not UTF-8 replaced
// (dump would throw on them).
std::string shown(const nlohmann::ordered_json& value) {
  constexpr std::size_t kMaxShown = 200;
  auto text = value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...";
  return text;
}

// What is wrong with a call's or a query's fields, or nothing. Every field the pool reads or
// forwards is checked here, before anything reads it: a wrong type read on the loop thread would
// throw there and leave its caller unanswered.
std::optional<std::string> request_fields_error(const Request& request) {
  const auto& message = request.message;
  if (!message.is_object())
    return "a request's message must be a JSON object, not " + shown(message);
  const auto field = [&message](const char* key) {
    const auto it = message.find(key);
    return it == message.end() ? nlohmann::ordered_json() : *it;
  };
  if (request.kind == Request::Kind::query) {
    if (const auto op = field("op"); !op.is_null() && !op.is_string())
      return "a query's op must be a string, not " + shown(op);
    return std::nullopt;
  }
  if (request.kind == Request::Kind::keep) {
    if (const auto kept = field("kept"); !kept.is_boolean())
      return "keep's kept must be true or false, not " + shown(kept);
    return std::nullopt;
  }
  if (request.kind != Request::Kind::call) return std::nullopt;
  const auto target = field("target");
  if (!target.is_string()) return "target must be a string 'module:function', not " + shown(target);
  const auto text = target.get<std::string>();
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return "target '" + text + "' is not of the form module:function";
  if (const auto args = field("args"); !args.is_array())
    return "args must be a JSON array, not " + shown(args);
  if (const auto kwargs = field("kwargs"); !kwargs.is_object())
    return "kwargs must be a JSON object, not " + shown(kwargs);
  if (const auto pickle = field("pickle"); !pickle.is_null() && !pickle.is_object())
    return "pickle must be a JSON object, not " + shown(pickle);
  if (const auto accept = field("accept"); !accept.is_null() && !accept.is_string())
    return "accept must be a string, not " + shown(accept);
  return std::nullopt;
}

PoolOptions with_defaults(PoolOptions options) {
  if (options.runtime_dir.empty()) options.runtime_dir = worker::find_worker_runtime();
  if (options.cuda_library.empty()) {
    const char* library = std::getenv("ISOHOST_CUDA_LIBRARY");
    options.cuda_library = library != nullptr && *library != '\0' ? library : "libcuda.so.1";
  }
  if (!options.clock) options.clock = steady_loop_clock();
  return options;
}

}  // namespace

Pool::Pool(Config config, PoolOptions options)
    : config_(std::move(config)),
      options_(with_defaults(std::move(options))),
      host_tag_(proc::host_tag()) {
  if (options_.sweep_orphans) {
    for (pid_t pid : proc::sweep_orphaned_workers()) {
      spdlog::warn("ended worker pid {} left behind by a host that is gone", pid);
    }
  }
  for (const auto& [name, env] : config_.environments) {
    auto& slot = slots_[name];
    slot.config = env;
    slot.idle = std::make_unique<IdleSpell>(clock(), io());
  }
  make_zygotes();
  if (config_.host.ram_budget != 0 || config_.host.ram_floor != 0) ram_pressure_.start();
  loop_.start(options_.poll_window);
}

Pool::~Pool() { shutdown(); }

std::chrono::milliseconds Pool::call_timeout(const Slot& slot) const {
  return slot.config.call_timeout.value_or(config_.host.call_timeout);
}

std::future<nlohmann::ordered_json> Pool::submit(Request request) {
  auto promise = std::make_shared<std::promise<nlohmann::ordered_json>>();
  auto future = promise->get_future();
  asio::post(io(), [this, request = std::move(request), promise]() mutable {
    submit_on_loop(std::move(request), [promise](Outcome outcome) {
      if (outcome.ok()) {
        promise->set_value(outcome.value());
      } else {
        promise->set_exception(std::make_exception_ptr(outcome.error()));
      }
    });
  });
  return future;
}

void Pool::submit(Request request, Handler handler) {
  asio::post(io(), [this, request = std::move(request), handler = std::move(handler)]() mutable {
    submit_on_loop(std::move(request), std::move(handler));
  });
}

void Pool::interrupt(std::uint64_t ticket, std::chrono::milliseconds grace) {
  asio::post(io(), [this, ticket, grace] { interrupt_on_loop(ticket, grace); });
}

void Pool::interrupt_on_loop(std::uint64_t ticket, std::chrono::milliseconds grace) {
  if (ticket == 0) return;
  for (auto& [name, slot] : slots_) {
    if (slot.ticket_in_flight == ticket && slot.worker) {
      spdlog::info("interrupting the call in flight in worker '{}' (grace {} ms)", name,
                   grace.count());
      slot.worker->interrupt(grace);
      return;
    }
    const auto queued =
        std::find_if(slot.queue.begin(), slot.queue.end(),
                     [ticket](const Pending& p) { return p.request.ticket == ticket; });
    if (queued != slot.queue.end()) {
      auto pending = std::move(*queued);
      slot.queue.erase(queued);
      pending.request.buffers.close();
      pending.handler(Outcome::failure(Error(
          ErrorKind::interrupted, "the call was interrupted before worker '" + name + "' ran it")));
      return;
    }
  }
}

std::future<nlohmann::ordered_json> Pool::call(const std::string& env, const std::string& target,
                                               nlohmann::ordered_json args,
                                               nlohmann::ordered_json kwargs) {
  return submit(Request::call(env, target, std::move(args), std::move(kwargs)));
}

std::future<PoolStatus> Pool::status() {
  auto promise = std::make_shared<std::promise<PoolStatus>>();
  auto future = promise->get_future();
  asio::post(io(), [this, promise] { promise->set_value(status_on_loop()); });
  return future;
}

PoolStatus Pool::status_on_loop() const {
  PoolStatus status;
  status.host_pid = ::getpid();
  status.rates = measured_rates_;
  const auto now = clock().now();
  for (const auto& [name, slot] : slots_) {
    if (!slot.worker) continue;
    const auto& w = *slot.worker;
    WorkerStatus ws{.env = name,
                    .pid = w.pid(),
                    .generation = w.generation(),
                    .state = worker::worker_state_name(w.state()),
                    .worker_state = w.state(),
                    .device = slot.config.device.value_or(0),
                    .calls = slot.calls,
                    .spawned_at = w.spawned_at(),
                    .ready_at = w.ready_at(),
                    .hello = w.hello(),
                    .pss_at_ready = slot.pss_at_ready,
                    .hibernation = slot.hibernation,
                    .sleep = slot.sleep,
                    .hibernate_allowed = slot.config.hibernate,
                    .kept = slot.kept,
                    .origin = slot.origin.how,
                    .zygote_pid = slot.origin.zygote_pid};
    if (is_idle(w.state())) {
      ws.idle_seconds = std::chrono::duration<double>(now - slot.idle->since).count();
    }
    const auto& starts = slot.metrics.start_seconds;
    if (starts.count() > 0)
      ws.mean_start_seconds = starts.sum() / static_cast<double>(starts.count());
    status.workers.push_back(std::move(ws));
  }
  for (const auto& [name, slot] : slots_) {
    if (slot.zygote) status.zygotes.push_back(slot.zygote->status());
  }
  return status;
}

void Pool::submit_on_loop(Request request, Handler handler) {
  auto answered = std::make_shared<bool>(false);
  Handler once = [answered, handler = std::move(handler)](Outcome outcome) {
    if (!std::exchange(*answered, true)) handler(std::move(outcome));
  };
  try {
    take_on_loop(std::move(request), once);
  } catch (const std::exception& e) {
    spdlog::error("a request failed unexpectedly, answered with the error: {}", e.what());
    const auto* error = dynamic_cast<const Error*>(&e);
    once(Outcome::failure(
        error != nullptr ? *error
                         : Error(ErrorKind::bad_request,
                                 std::string("the host could not take the request: ") + e.what())));
  }
}

void Pool::take_on_loop(Request request, Handler handler) {
  // A refused request's buffers are closed before its caller hears of it.
  const auto refuse = [&](const Error& error) {
    request.buffers.close();
    handler(Outcome::failure(error));
  };
  if (!phase_.serving()) {
    refuse(Error(ErrorKind::shutting_down, "the host is shutting down"));
    return;
  }
  if (const auto error = request_fields_error(request)) {
    refuse(Error(ErrorKind::bad_request, *error));
    return;
  }
  if (request.kind == Request::Kind::make_room) {
    make_room_for_host(request.message, std::move(handler));
    return;
  }
  auto it = slots_.find(request.env);
  if (it == slots_.end()) {
    std::string known;
    for (const auto& [name, slot] : slots_) known += (known.empty() ? "" : ", ") + name;
    refuse(Error(ErrorKind::unknown_environment,
                 "no environment named '" + request.env + "' is configured in " + config_.source +
                     (known.empty() ? " (it defines none)" : " (known: " + known + ")")));
    return;
  }
  Slot& slot = it->second;
  if (request.kind == Request::Kind::keep) {
    keep(slot, request.message.at("kept").get<bool>());
    handler(Outcome::success({{"kept", slot.kept}}));
    return;
  }
  // Release, reap, hibernate, wake and queries concern the worker that is there; they never
  // start one.
  if (request.kind != Request::Kind::call && !slot.worker) {
    const char* key = request.kind == Request::Kind::release     ? "released"
                      : request.kind == Request::Kind::reap      ? "reaped"
                      : request.kind == Request::Kind::hibernate ? "hibernated"
                      : request.kind == Request::Kind::sleep     ? "asleep"
                      : request.kind == Request::Kind::wake      ? "woken"
                                                                 : "answered";
    if (request.kind == Request::Kind::query) {
      handler(Outcome::failure(Error(ErrorKind::bad_request,
                                     "no worker is running for environment '" + request.env + "'")));
    } else {
      handler(Outcome::success(
          {{key, false}, {"reason", "no worker is running for environment '" + request.env + "'"}}));
    }
    return;
  }
  if (request.kind == Request::Kind::query) {
    const auto op = request.message.find("op");  // a string, null or absent (request_fields_error)
    const bool named = op != request.message.end() && op->is_string();
    slot.worker->query(named ? op->get<std::string>() : "ping", std::move(handler));
    return;
  }
  if (request.kind == Request::Kind::hibernate) {
    begin_hibernation(slot, std::move(handler));
    return;
  }
  if (request.kind == Request::Kind::wake) {
    begin_wake(slot, std::move(handler));
    return;
  }
  if (request.kind == Request::Kind::sleep && slot.worker->state() == WorkerState::hibernated) {
    handler(Outcome::success(
        {{"asleep", false},
         {"reason", "the worker is hibernated: its models are already off the card"}}));
    return;
  }
  if (request.kind == Request::Kind::release && slot.worker->state() == WorkerState::hibernated) {
    handler(Outcome::success({{"released", false}, {"reason", "the worker is hibernated: it holds no VRAM, "
                                                              "and a release would wake it"}}));
    return;
  }
  slot.queue.push_back(Pending{std::move(request), std::move(handler)});
  pump(slot);
}

void Pool::pump(Slot& slot) {
  if (!phase_.serving()) {
    fail_queue(slot, Error(ErrorKind::shutting_down, "the host is shutting down"));
    return;
  }
  if (slot.queue.empty()) {
    if (slot.state == EnvState::awaiting_zygote) slot.state = EnvState::empty;  // nobody waits now
    arm_idle_timers(slot);
    return;
  }
  if (!slot.worker) {
    if (slot.state == EnvState::forking) return;  // the fork's answer pumps again
    if (auto refusal = slot.backoff.refusal(clock().now(), slot.config.name)) {
      fail_queue(slot, Error(ErrorKind::crash_loop, *refusal));
      return;
    }
    start_worker(slot);
    return;
  }
  // A hibernated or asleep worker is woken for a call; a reap, release or sleep is answered
  // as it is (dispatch).
  const auto state = slot.worker->state();
  const bool for_call = slot.queue.front().request.kind == Request::Kind::call;
  const bool resting = state == WorkerState::hibernated || state == WorkerState::asleep;
  if (resting && for_call) {
    if (slot.state != EnvState::admitting_wake) begin_wake(slot, nullptr);
    return;
  }
  if (state != WorkerState::ready && !resting)
    return;  // its ready/reply/exit/hibernation pumps again
  auto pending = std::move(slot.queue.front());
  slot.queue.pop_front();
  dispatch(slot, std::move(pending));
}

worker::Worker::AskHandler Pool::ask_handler(decltype(Request::on_ask) on_ask) {
  if (!on_ask) return nullptr;
  // The caller answers from its own thread.
  return [this, on_ask = std::move(on_ask)](const nlohmann::ordered_json& ask,
                                            worker::Worker::AskAnswer answer) {
    on_ask(ask, on_loop(std::move(answer)));
  };
}

std::function<void(nlohmann::ordered_json)> Pool::on_loop(
    std::function<void(nlohmann::ordered_json)> answer) {
  return [this, answer = std::move(answer)](nlohmann::ordered_json reply) {
    asio::post(io(), [answer, reply = std::move(reply)]() mutable { answer(std::move(reply)); });
  };
}

void Pool::dispatch(Slot& slot, Pending pending) {
  auto& request = pending.request;
  if (request.kind == Request::Kind::reap) {
    const auto pid = slot.worker->pid();
    const auto generation = slot.worker->generation();
    retire(slot, "reap requested");
    pending.handler(Outcome::success({{"reaped", true}, {"pid", pid}, {"generation", generation}}));
    pump(slot);
    return;
  }
  if (slot.worker->state() != WorkerState::ready) {  // resting: hibernated or asleep
    answer_resting(slot, std::move(pending));
    return;
  }
  if (request.kind == Request::Kind::sleep) {
    put_to_sleep(slot, [this, &slot, handler = std::move(pending.handler)](Outcome outcome) {
      handler(std::move(outcome));
      pump(slot);
    });
    return;
  }
  nlohmann::ordered_json message;
  std::string what;
  std::chrono::milliseconds timeout{0};
  if (request.kind == Request::Kind::call) {
    what = "call " + request.message["target"].get<std::string>();
    message = {{"op", "call"},
               {"target", request.message["target"]},
               {"args", request.message["args"]},
               {"kwargs", request.message["kwargs"]}};
    copy_value_fields(request.message, message);
    timeout = call_timeout(slot);
  } else {
    what = "release";
    message = {{"op", "release"}};
    timeout = config_.host.shutdown_grace + call_timeout(slot);
  }
  auto w = slot.worker;
  slot.ticket_in_flight = request.ticket;
  loop_.stop_lingering();  // the worker's threads need the cores now
  w->request(
      std::move(message), timeout, what,
      [this, &slot, w, kind = request.kind, ticket = request.ticket, sent = Clock::now(),
       handler = std::move(pending.handler)](Outcome outcome) {
        if (slot.ticket_in_flight == ticket) slot.ticket_in_flight = 0;
        if (kind == Request::Kind::call) {
          ++slot.metrics.calls;
          if (!outcome.ok()) ++slot.metrics.call_errors;
          slot.metrics.call_seconds.observe(
              std::chrono::duration<double>(Clock::now() - sent).count());
        } else if (outcome.ok()) {
          ++slot.metrics.releases;
        }
        // A worker that answered, even with the function's exception, is healthy.
        if (w->state() == WorkerState::ready || w->state() == WorkerState::busy) {
          slot.backoff.record_success();
          // A release is the host's own housekeeping: it neither counts as a call nor
          // restarts the idle clock that leads to the reap.
          if (slot.worker == w && kind == Request::Kind::call) {
            // What the call reserved is allocated by now, or never will be: the
            // driver's figures tell from here on.
            admission_.grants().drop_worker(slot.config.name);
            ++slot.calls;
            slot.idle->begin(clock().now());
          }
        }
        handler(std::move(outcome));
        if (kind == Request::Kind::call) loop_.linger(config_.host.loop_poll_after_call);
        pump(slot);
      },
      request.buffers.take(), ask_handler(std::move(request.on_ask)));
}

void Pool::answer_resting(Slot& slot, Pending pending) {
  const auto& w = *slot.worker;
  const bool asleep = w.state() == WorkerState::asleep;
  nlohmann::ordered_json answer;
  if (pending.request.kind == Request::Kind::sleep && asleep) {
    answer = {
        {"asleep", true}, {"already", true}, {"pid", w.pid()}, {"generation", w.generation()}};
  } else {
    const char* key = pending.request.kind == Request::Kind::sleep ? "asleep" : "released";
    answer = {{key, false},
              {"reason", asleep ? "the worker is asleep: its models and caches are in its host RAM"
                                : "the worker is hibernated: it holds no VRAM"}};
  }
  pending.request.buffers.close();
  pending.handler(Outcome::success(std::move(answer)));
  pump(slot);
}

void Pool::start_worker(Slot& slot) {
  if (!slot.start_began) slot.start_began = Clock::now();
  if (slot.zygote) {
    switch (slot.zygote->prepare()) {
      case Zygote::Readiness::fork:
        fork_worker(slot);
        return;
      case Zygote::Readiness::wait:
        slot.state = EnvState::awaiting_zygote;
        return;  // the zygote's change pumps again
      case Zygote::Readiness::unavailable:
        break;
    }
  }
  spawn_worker(slot, ++slot.generation);  // retired generations are never reused
}

worker::WorkerOptions Pool::worker_options(const Slot& slot, unsigned generation) const {
  return worker::WorkerOptions{.env_name = slot.config.name,
                               .python = slot.config.python,
                               .module_path = slot.config.path,
                               .cwd = slot.config.cwd,
                               .env = worker_environment(slot.config),
                               .runtime_dir = options_.runtime_dir,
                               .host_tag = host_tag_,
                               .generation = generation,
                               .start_timeout = config_.host.start_timeout,
                               .poll_window = config_.host.worker_poll};
}

Worker::Events Pool::worker_events(Slot& slot, const std::shared_ptr<std::weak_ptr<Worker>>& weak) {
  return Worker::Events{
      .on_ready =
          [this, &slot](const Error* error) {
            if (error != nullptr) {
              fail_queue(slot, *error);
            } else {
              slot.idle->begin(clock().now());
              ++slot.metrics.starts;
              slot.metrics.start_seconds.observe(
                  std::chrono::duration<double>(slot.idle->since - slot.worker->spawned_at())
                      .count());
              try {
                slot.pss_at_ready = probe::read_footprint(slot.worker->pid()).pss;
              } catch (const probe::ProbeError&) {
                slot.pss_at_ready.reset();
              }
              pump(slot);
            }
          },
      .on_exit =
          [this, &slot, weak](const worker::ExitReport& report) {
            if (auto w = weak->lock()) on_worker_exit(slot, w, report);
          },
      .on_worker_request =
          [this, &slot, weak](const nlohmann::ordered_json& request,
                              std::function<void(nlohmann::ordered_json)> answer) {
            if (auto w = weak->lock()) on_worker_request(slot, w, request, std::move(answer));
          },
      .run_escape_pass =
          [this](std::function<void()> pass) { sampling_.run_off_loop(std::move(pass)); },
      .on_output = options_.on_output,
  };
}

void Pool::spawn_worker(Slot& slot, unsigned generation) {
  auto weak = std::make_shared<std::weak_ptr<Worker>>();
  try {
    auto options = worker_options(slot, generation);
    auto events = worker_events(slot, weak);
    slot.worker = options_.launch_worker
                      ? options_.launch_worker(io(), std::move(options), std::move(events))
                      : Worker::launch(io(), std::move(options), std::move(events));
  } catch (const Error& e) {
    slot.state = EnvState::empty;
    slot.start_began.reset();
    slot.backoff.record_failure(clock().now(), e.what());
    fail_queue(slot, e);
    return;
  }
  track_started(slot, weak, "spawn");
}

void Pool::track_started(Slot& slot, const std::shared_ptr<std::weak_ptr<Worker>>& weak,
                         const char* origin) {
  *weak = slot.worker;
  slot.state = EnvState::running;
  slot.start_began.reset();
  slot.calls = 0;
  slot.origin.how = origin;
  slot.origin.zygote_pid = slot.origin.how == "zygote" ? slot.zygote->pid() : -1;
  live_.push_back(slot.worker);
  spdlog::info("started worker '{}' (pid {}, generation {}{})", slot.config.name,
               slot.worker->pid(), slot.worker->generation(),
               slot.origin.zygote_pid > 0
                   ? fmt::format(", forked from zygote pid {}", slot.origin.zygote_pid)
                   : "");
}

void Pool::on_worker_exit(Slot& slot, const std::shared_ptr<Worker>& w,
                          const worker::ExitReport& report) {
  if (slot.worker == w) {
    slot.worker = nullptr;
    admission_.grants().drop_worker(slot.config.name);
    slot.hibernation.reset();
    slot.sleep.reset();
    slot.state = EnvState::empty;  // an admission for its wake finds it gone and moves on
  }
  if (!report.expected) {
    slot.backoff.record_failure(clock().now(), report.reason);
    ++slot.metrics.crashes;
  }
  std::erase(live_, w);
  if (!phase_.serving()) {
    finish_shutdown_if_done();
    return;
  }
  pump(slot);
}

void Pool::retire(Slot& slot, const std::string& reason) {
  auto w = std::move(slot.worker);
  slot.worker = nullptr;
  slot.idle->cancel_timers();
  admission_.grants().drop_worker(slot.config.name);
  slot.hibernation.reset();
  slot.sleep.reset();
  slot.state = EnvState::empty;
  ++slot.metrics.reaps;
  spdlog::info("retiring worker '{}' (pid {}, generation {}): {}", slot.config.name, w->pid(),
               w->generation(), reason);
  w->shutdown(config_.host.shutdown_grace);
}

void Pool::keep(Slot& slot, bool kept) {
  if (slot.kept == kept) return;
  slot.kept = kept;
  spdlog::info("environment '{}' {}", slot.config.name,
               kept ? "kept: its workers are not reaped until it is let go"
                    : "let go: its workers may be reaped again");
  if (!kept && slot.worker && is_idle(slot.worker->state()) && slot.queue.empty()) {
    arm_idle_timers(slot);  // an idle reap that came due meanwhile happens now
  }
}

void Pool::arm_idle_timers(Slot& slot) {
  if (!slot.worker) return;
  const auto left = idle_steps_left(slot.worker->state(), slot.idle->step, slot.config.hibernate);
  if (left.release) {
    arm_idle_timer(slot, *slot.idle->release, config_.host.idle_release,
                   [this](Slot& s) { release(s, "idle"); });
  }
  if (left.hibernate) {
    arm_idle_timer(slot, *slot.idle->hibernate, config_.host.idle_hibernate,
                   [this](Slot& s) { hibernate_idle(s); });
  }
  if (left.sleep) {
    arm_idle_timer(slot, *slot.idle->sleep, config_.host.idle_sleep,
                   [this](Slot& s) { sleep_idle(s); });
  }
  if (left.reap) {
    arm_idle_timer(slot, *slot.idle->reap, config_.host.idle_reap, [this](Slot& s) {
      if (s.kept) return;  // keep(false) arms it again
      retire(s, fmt::format("idle for {:g} s",
                            std::chrono::duration<double>(config_.host.idle_reap).count()));
    });
  }
}

void Pool::arm_idle_timer(Slot& slot, Alarm& alarm, std::chrono::milliseconds window,
                          std::function<void(Slot&)> action) {
  if (window.count() == 0) return;
  alarm.set(slot.idle->since + window - clock().now(),
            [this, &slot, &alarm, w = std::weak_ptr<Worker>(slot.worker), window,
             action = std::move(action)] {
              if (!phase_.serving() || !slot.worker || slot.worker != w.lock()) return;
              const auto state = slot.worker->state();
              if (!is_idle(state) || !slot.queue.empty() || slot.state == EnvState::admitting_wake)
                return;
              if (clock().now() - slot.idle->since < window) {
                arm_idle_timer(slot, alarm, window, action);  // a call came and went meanwhile
                return;
              }
              action(slot);
            });
}

void Pool::release(Slot& slot, const std::string& why, std::function<void()> done) {
  if (slot.worker->state() != WorkerState::ready) return;
  slot.idle->step = std::max(slot.idle->step, IdleStep::released);
  const auto pid = slot.worker->pid();
  const auto generation = slot.worker->generation();
  const auto name = slot.config.name;
  auto logged = [name, pid, generation, why, done = std::move(done)](Outcome outcome) {
    if (!outcome.ok()) {
      spdlog::warn("{} release of worker '{}' (pid {}, generation {}) failed: {}", why, name, pid, generation,
                   outcome.error().what());
    } else {
      // The worker's receipt is its own word: anything but an object counts as saying nothing.
      const auto r =
          outcome.value().is_object() ? outcome.value() : nlohmann::ordered_json::object();
      const auto freed = [&r](const char* before, const char* after) {
        const auto b = r.value(before, nlohmann::ordered_json());
        const auto a = r.value(after, nlohmann::ordered_json());
        return b.is_number() && a.is_number() ? b.get<double>() - a.get<double>() : 0.0;
      };
      spdlog::info(
          "{} release of worker '{}' (pid {}, generation {}) gave back {:.1f} MB of RAM and "
          "{:.1f} MiB of VRAM cache in {:.3f} s",
          why, name, pid, generation, freed("rss_before", "rss_after") / 1e6,
          freed("reserved_before", "reserved_after") / 1048576.0,
          r.value("seconds", nlohmann::ordered_json()).is_number() ? r["seconds"].get<double>()
                                                                   : 0.0);
    }
    if (done) done();
  };
  slot.queue.push_back(Pending{Request{Request::Kind::release, name}, std::move(logged)});
  pump(slot);
}

void Pool::fail_queue(Slot& slot, const Error& error) {
  auto queue = std::move(slot.queue);
  slot.queue.clear();
  for (auto& pending : queue) {
    pending.request.buffers.close();  // closed before the caller hears
    pending.handler(Outcome::failure(error));
  }
}

void Pool::on_stopped(std::function<void()> hook) {
  asio::post(io(),
             [this, hook = std::move(hook)]() mutable { phase_.on_stopped(std::move(hook)); });
}

void Pool::request_shutdown() {
  asio::post(io(), [this] {
    if (!phase_.begin_shutdown()) return;
    // Said only where there is something to end: a host made and closed to check a config
    // (the ComfyUI adapter checks each environment so) would log it for nothing.
    if (!live_.empty()) spdlog::info("shutting down: ending {} worker(s)", live_.size());
    admission_.stop();
    ram_pressure_.stop();
    for (auto& [name, slot] : slots_) {
      fail_queue(slot, Error(ErrorKind::shutting_down, "the host is shutting down"));
      if (slot.worker) retire(slot, "host shutdown");
      if (slot.zygote) slot.zygote->shutdown(config_.host.shutdown_grace);
    }
    finish_shutdown_if_done();
  });
}

void Pool::finish_shutdown_if_done() {
  if (!live_.empty() || phase_.stopped()) return;
  for (const auto& [name, slot] : slots_) {
    if (slot.state == EnvState::forking || (slot.zygote && slot.zygote->alive()))
      return;  // its end calls again
  }
  phase_.stop();
  for (auto& [name, slot] : slots_) {
    slot.idle->cancel_timers();
  }
  loop_.release();
}

void Pool::shutdown() {
  if (!loop_.running()) return;
  request_shutdown();
  loop_.join();
}

void Pool::wait_until_stopped() { loop_.join(); }

}  // namespace isohost::pool
