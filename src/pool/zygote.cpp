#include "pool/zygote.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <system_error>

#include "probe/proc_stat.hpp"
#include "proc/process_group.hpp"

namespace isohost::pool {

using worker::Outcome;
using worker::Worker;
using worker::WorkerState;

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

nlohmann::ordered_json ZygoteStatus::to_json() const {
  nlohmann::ordered_json out{
      {"env", env},
      {"pid", pid},
      {"state", state},
      {"preload", preload},
      {"forks", forks},
      {"starts", starts},
      {"refusal", refusal ? nlohmann::ordered_json(*refusal) : nlohmann::ordered_json()}};
  if (memory && memory->ram) {
    out["rss"] = memory->ram->rss;
    out["pss"] = memory->ram->pss;
    out["private"] = memory->ram->private_bytes();
  }
  return out;
}

Zygote::Zygote(asio::io_context& io, worker::WorkerOptions options, std::function<void()> on_change)
    : io_(io), options_(std::move(options)), on_change_(std::move(on_change)), restart_timer_(io) {}

Zygote::Readiness Zygote::prepare() {
  if (refusal_ || stopping_) return Readiness::unavailable;
  if (!process_ && Clock::now() >= retry_at_ && !backoff_.refusal(Clock::now(), env())) start();
  if (!process_) return Readiness::unavailable;
  // Only a zygote's first start is worth waiting for: it does the imports the worker would.
  // After a failure, workers start fresh until it is back.
  const bool first = backoff_.consecutive_failures() == 0;
  switch (process_->state()) {
    case WorkerState::ready:
      return Readiness::fork;
    case WorkerState::busy:
      return Readiness::wait;
    case WorkerState::starting:
      return first ? Readiness::wait : Readiness::unavailable;
    default:
      return Readiness::unavailable;
  }
}

void Zygote::start() {
  auto options = options_;
  options.env_name = env() + "/zygote";
  options.generation = ++starts_;
  try {
    process_ = Worker::launch(io_, std::move(options),
                              {.on_ready = [this](const Error* error) { on_ready(error); },
                               .on_exit = [this](const worker::ExitReport& r) { on_exit(r); }});
  } catch (const Error& e) {
    spdlog::warn(
        "cannot start the zygote of '{}': {}; tried again when a worker of '{}' starts, "
        "in {:g} s at the earliest",
        env(), e.what(), env(), seconds(failed_to_start(e.what())));
    return;
  }
  spdlog::info("starting the zygote of '{}' (pid {}), preloading {}", env(), process_->pid(),
               fmt::join(options_.preload, ","));
}

void Zygote::on_ready(const Error* error) {
  if (error != nullptr) {
    failed_start_ = true;
    spdlog::warn(
        "the zygote of '{}' failed to start: {}; its workers start fresh, and it is tried again "
        "when one starts, in {:g} s at the earliest",
        env(), error->what(), seconds(failed_to_start(error->what())));
  } else {
    spdlog::info("the zygote of '{}' (pid {}) is ready: preloaded {} in {:.2f} s", env(),
                 process_->pid(), fmt::join(options_.preload, ","),
                 seconds(Clock::now() - process_->spawned_at()));
    const auto refusal = process_->hello().value("refusal", nlohmann::ordered_json());
    if (refusal.is_string()) refuse(refusal.get<std::string>());
  }
  on_change_();
}

void Zygote::on_exit(const worker::ExitReport& report) {
  const pid_t pid = process_ ? process_->pid() : -1;
  process_ = nullptr;
  if (!stopping_ && !refusal_) {
    if (!failed_start_) {
      backoff_.record_failure(Clock::now(), report.reason);
      spdlog::warn(
          "the zygote of '{}' (pid {}) ended: {}; running workers are unaffected, new "
          "workers of '{}' start fresh until it is restarted (in {:g} s)",
          env(), pid, report.status.describe(), env(), seconds(backoff_.current_delay()));
      schedule_restart();
    }
  }
  failed_start_ = false;
  on_change_();
}

Zygote::Clock::duration Zygote::failed_to_start(const std::string& reason) {
  const auto now = Clock::now();
  backoff_.record_failure(now, reason);
  const Clock::duration delay =
      std::max<Clock::duration>(kRetryAfterFailedStart, backoff_.current_delay());
  retry_at_ = now + delay;
  return delay;
}

void Zygote::schedule_restart() {
  if (stopping_ || refusal_) return;
  restart_timer_.expires_after(backoff_.current_delay());
  restart_timer_.async_wait([this](const asio::error_code& ec) {
    if (ec || process_ || stopping_ || refusal_) return;
    start();
  });
}

void Zygote::refuse(const std::string& reason) {
  refusal_ = reason;
  spdlog::warn("the zygote of '{}' refused to fork: {}; workers of '{}' start fresh from now on",
               env(), reason, env());
  restart_timer_.cancel();
  // It is of no further use; its memory is better given back.
  if (process_) process_->shutdown(std::chrono::seconds(1));
}

pid_t Zygote::new_child(const nlohmann::ordered_json& answer, std::uint64_t asked_at,
                        wire::UniqueFd& pidfd) const {
  const auto field = answer.is_object() ? answer.find("pid") : answer.end();
  if (!answer.is_object() || field == answer.end() || !field->is_number_integer() || *field <= 0) {
    throw std::runtime_error("the zygote answered " + answer.dump() + ", not {\"pid\": N}");
  }
  const auto pid = field->get<pid_t>();
  if (pid == process_->pid()) throw std::runtime_error("the zygote answered with its own pid");
  pidfd = proc::open_pidfd(pid);
  // Never adopt what we cannot reap: the zygote must have made the host the parent.
  if (!proc::is_child(pidfd.get()))
    throw std::runtime_error(fmt::format("pid {} is not a child of the host", pid));
  // A child of the host that existed before the fork was asked for (another environment's
  // worker) is not this fork's child: adopting it would kill a healthy worker's group.
  if (probe::process_start_time(pid) < asked_at) {
    throw std::runtime_error(fmt::format("pid {} started before the fork was asked for", pid));
  }
  return pid;
}

void Zygote::fork(const std::string& env_name, unsigned generation, ForkDone done) {
  worker::WorkerChannels channels;
  try {
    channels = worker::WorkerChannels::make();
  } catch (const Error& e) {
    done(std::nullopt, e.what());
    return;
  }
  std::vector<wire::UniqueFd> passed;
  passed.push_back(std::move(channels.worker_socket));
  passed.push_back(std::move(channels.worker_side_socket));
  passed.push_back(std::move(channels.stdout_write));
  passed.push_back(std::move(channels.stderr_write));
  auto kept = std::make_shared<worker::AdoptedProcess>(
      worker::AdoptedProcess{.host_socket = std::move(channels.host_socket),
                             .host_side_socket = std::move(channels.host_side_socket),
                             .stdout_read = std::move(channels.stdout_read),
                             .stderr_read = std::move(channels.stderr_read)});
  nlohmann::ordered_json request{{"op", "fork"},
                                 {"env", env_name},
                                 {"generation", generation},
                                 {"descriptors", {"socket", "side", "stdout", "stderr"}}};
  const auto asked_at = probe::boot_clock_ticks();
  process_->request(
      std::move(request), options_.start_timeout, "fork",
      [this, kept, asked_at, done = std::move(done)](Outcome outcome) {
        if (!outcome.ok()) {
          const auto& detail = outcome.error().detail();
          if (detail.is_object() && detail.value("where", "") == "fork" &&
              detail.value("type", "").ends_with("Refused")) {
            refuse(detail.value("message", std::string("refused")));
          }
          done(std::nullopt, outcome.error().what());
          return;
        }
        pid_t pid = -1;
        try {
          pid = new_child(outcome.value(), asked_at, kept->pidfd);
        } catch (const std::exception& e) {
          done(std::nullopt, std::string("fork answer unusable: ") + e.what());
          return;
        }
        kept->pid = pid;
        ++forks_;
        backoff_.record_success();
        done(std::move(*kept), "");
      },
      std::move(passed));
}

void Zygote::shutdown(std::chrono::milliseconds grace) {
  stopping_ = true;
  restart_timer_.cancel();
  if (process_) process_->shutdown(grace);
}

ZygoteStatus Zygote::status() const {
  ZygoteStatus s{.env = env(),
                 .pid = pid(),
                 .preload = options_.preload,
                 .forks = forks_,
                 .starts = starts_,
                 .refusal = refusal_};
  if (!process_) {
    s.state = refusal_ ? "refused" : "absent";
  } else {
    switch (process_->state()) {
      case WorkerState::starting:
        s.state = "starting";
        break;
      case WorkerState::ready:
        s.state = "ready";
        break;
      case WorkerState::busy:
        s.state = "forking";
        break;
      default:
        s.state = refusal_ ? "refused" : "stopping";
        break;
    }
  }
  return s;
}

}  // namespace isohost::pool
