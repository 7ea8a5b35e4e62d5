// `isohost bench switch`: three environments each holding a 10 GiB model on a card with room
// for two, called in turn, so that every call needs the card back from another environment
// (issue #14). A process that is not an isohost worker holds the rest of the card. Three ways
// to switch, each beside the one-second target:
//   switch.sleep_per_switch  the pool's way: the call goes through admission, which puts an idle
//                            worker to sleep (or whatever it finds cheapest) and wakes the
//                            called one; timed as the caller waits, the data checked after each;
//   switch.reap_and_start    the idle worker reaped, the called environment started fresh and
//                            its 10 GiB made again;
//   switch.in_process_move   one process moving the same model to host RAM and back with
//                            Module.to("cpu") / .to("cuda"), new pageable memory each time;
//   switch.in_process_move_pinned  the same into host tensors pinned once before (not timed),
//                            as a single-process ComfyUI keeping its offloaded weights pinned.
// Needs torch with CUDA, and a card with at least 23 GiB free.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "benchmarks.hpp"
#include "elapsed.hpp"
#include "pool/pool.hpp"
#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "wire/unique_fd.hpp"
#include "worker/runtime_location.hpp"

namespace isohost::bench {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr std::uint64_t kModel = 10 * kGiB;
// What one worker holding the model takes on the card: the model, its context and the
// allocator's cache (about 0.6 GiB on an H200, rounded up).
constexpr std::uint64_t kPerWorker = kModel + kGiB;
// The room the foreign process leaves: two such workers and a GiB for the host's reserve
// (vram_reserve_mib) and the third worker's context.
constexpr std::uint64_t kRoom = 2 * kPerWorker + kGiB;
constexpr std::array<const char*, 3> kEnvs = {"a", "b", "c"};
constexpr double kOneSecondMs = 1000.0;
constexpr const char* kStages = "isohost_worker.switch_stages:";

// A plain python3 child, not an isohost worker, holding all of the card's free memory but
// `room` bytes until it is ended (isohost_worker.switch_stages fill). Ended at destruction:
// its stdin closed, then its group killed if it has not gone within 5 s.
class CardFiller {
 public:
  CardFiller(const std::string& python, std::uint64_t room) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "bench switch: pipe");
    }
    wire::UniqueFd child_stdin(in[0]);
    stdin_.reset(in[1]);
    stdout_.reset(out[0]);
    wire::UniqueFd child_stdout(out[1]);
    child_ = proc::spawn(
        {.program = python,
         .argv = {python, "-m", "isohost_worker.switch_stages", "fill", std::to_string(room)},
         .env = proc::scrubbed_environment({{"PYTHONPATH", worker::find_worker_runtime()}}),
         .fds = {{child_stdin.get(), 0}, {child_stdout.get(), 1}, {2, 2}}});
    child_stdout.reset();  // so that its end shows as EOF here
    const auto line = read_line(std::chrono::seconds(120));
    report_ = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!report_.is_object() || !report_.value("ready", false)) {
      end();
      const auto reason = report_.is_object() ? report_.value("reason", line) : line;
      throw std::runtime_error(
          "bench switch needs torch with CUDA and a card with " + std::to_string(room >> 30) +
          " GiB free: the process meant to fill the card (" + python +
          " -m isohost_worker.switch_stages fill) did not get ready: " +
          (reason.empty() ? std::string("no output (its errors are above)") : reason));
    }
  }
  ~CardFiller() { end(); }
  CardFiller(const CardFiller&) = delete;
  CardFiller& operator=(const CardFiller&) = delete;

  [[nodiscard]] const nlohmann::ordered_json& report() const { return report_; }
  [[nodiscard]] pid_t pid() const { return child_.pid; }

 private:
  std::string read_line(std::chrono::seconds timeout) {
    std::string line;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{.fd = stdout_.get(), .events = POLLIN, .revents = 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, left.count()))) <= 0) continue;
      char c = 0;
      const auto n = ::read(stdout_.get(), &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || c == '\n') return line;
      line += c;
    }
    return line;
  }

  void end() noexcept {
    if (child_.pid < 0) return;
    stdin_.reset();
    pollfd p{.fd = child_.pidfd.get(), .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 5000) <= 0) proc::signal_group(child_.pid, SIGKILL);
    try {
      proc::reap(child_.pidfd.get());
    } catch (const std::exception&) {  // reaped by someone else: it is gone either way
    }
    child_.pid = -1;
  }

  proc::Child child_;
  wire::UniqueFd stdin_;
  wire::UniqueFd stdout_;
  nlohmann::ordered_json report_;
};

pool::Config switch_config(const BenchOptions& options) {
  pool::Config config;
  config.host.idle_reap = std::chrono::milliseconds(0);
  config.host.idle_release = std::chrono::milliseconds(0);
  for (const char* env : kEnvs) {
    config.environments[env] = pool::EnvironmentConfig{.name = env, .python = options.python};
  }
  return config;
}

// The checksum inside model_checksum's answer ({"checksum": x, ...}), or the answer itself.
nlohmann::ordered_json checksum_of(const nlohmann::ordered_json& answer) {
  if (answer.is_object() && answer.contains("checksum")) return checksum_of(answer["checksum"]);
  return answer;
}

Figure with_target(Figure figure) {
  figure.limit = kOneSecondMs;
  figure.limit_name = "target 1.0 s";
  return figure;
}

// The worker of each environment now: its state and pid.
struct Seen {
  std::string state;
  pid_t pid = -1;
};
std::map<std::string, Seen> workers_now(pool::Pool& pool) {
  std::map<std::string, Seen> seen;
  for (const auto& w : pool.status().get().workers) seen[w.env] = {w.state, w.pid};
  return seen;
}

// What happened to the ready workers of `before` other than those in `skip`: how admission made
// room ("sleep", "hibernate", "reap"; counted into `steps`).
void count_steps(const std::map<std::string, Seen>& before,
                 const std::map<std::string, Seen>& after, const std::vector<std::string>& skip,
                 std::map<std::string, int>& steps) {
  for (const auto& [env, was] : before) {
    if (was.state != "ready" || std::find(skip.begin(), skip.end(), env) != skip.end()) continue;
    const auto now = after.find(env);
    if (now == after.end() || now->second.pid != was.pid) {
      ++steps["reap"];
    } else if (now->second.state == "asleep") {
      ++steps["sleep"];
    } else if (now->second.state == "hibernated") {
      ++steps["hibernate"];
    }
  }
}

std::string describe_steps(const std::map<std::string, int>& steps) {
  if (steps.empty()) return "nothing";
  std::string text;
  for (const auto& [step, count] : steps)
    text += (text.empty() ? "" : ", ") + step + " " + std::to_string(count);
  return text;
}

bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren == std::string::npos || text.substr(paren + 2, 1) == "Z";
}

std::uint64_t card_free(pool::Pool& pool) {
  const auto status = pool.status_with_memory().get();
  if (status.devices.empty()) {
    throw std::runtime_error("bench switch: the pool sees no GPU: " +
                             status.gpu_unavailable_reason);
  }
  return status.devices.front().device.free;
}

// Reaps `env`'s worker and waits until its process has ended and the card shows its memory free
// (at least `expect_freed` more free than `free_before`, for at most 20 s).
void reap_and_wait(pool::Pool& pool, const std::string& env, std::uint64_t free_before,
                   std::uint64_t expect_freed) {
  const auto answer = pool.submit({pool::Request::Kind::reap, env}).get();
  if (!answer.value("reaped", false)) return;
  const auto pid = answer.value("pid", pid_t{-1});
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (pid > 0 && !process_gone(pid) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  while (card_free(pool) < free_before + expect_freed && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

nlohmann::ordered_json load(pool::Pool& pool, const std::string& env) {
  const auto answer = pool.call(env, std::string(kStages) + "load_model", {kModel}).get();
  return checksum_of(answer.value("checksum", nlohmann::ordered_json()));
}

}  // namespace

std::vector<Figure> bench_switch(const BenchOptions& options) {
  const std::size_t switches = std::max(6, options.rounds / 333);
  const int move_rounds = std::max(3, options.rounds / 700);
  CardFiller filler(options.python, kRoom);
  std::cerr << "bench switch: a foreign process (pid " << filler.pid() << ") holds "
            << filler.report().value("held", std::uint64_t{0}) / kGiB << " GiB; "
            << filler.report().value("free", std::uint64_t{0}) / (kGiB / 10) / 10.0
            << " GiB free for the workers\n";
  pool::Pool pool(switch_config(options), {.sweep_orphans = false});

  // The loads, each through reserve_vram: the third makes admission take the card back.
  std::map<std::string, nlohmann::ordered_json> expected;
  for (const char* env : kEnvs) expected[env] = load(pool, env);

  // Calls in turn; a call whose worker was not on the card (asleep, hibernated) is a switch.
  std::vector<double> sleep_switch;
  std::map<std::string, int> steps;
  for (std::size_t i = 0; sleep_switch.size() < switches && i < 4 * switches; ++i) {
    const std::string env = kEnvs[i % kEnvs.size()];
    const auto before = workers_now(pool);
    const auto it = before.find(env);
    const bool on_card = it != before.end() && it->second.state == "ready";
    const auto start = Clock::now();
    const auto got = checksum_of(pool.call(env, "isohost_worker.stages:model_checksum").get());
    const double ms = elapsed<std::milli>(start);
    if (got != expected[env]) {
      throw std::runtime_error("bench switch: environment '" + env +
                               "''s model changed after switch " +
                               std::to_string(sleep_switch.size() + 1) + ": checksum " +
                               got.dump() + ", at load " + expected[env].dump());
    }
    if (on_card) continue;
    sleep_switch.push_back(ms);
    count_steps(before, workers_now(pool), {env}, steps);
  }
  if (sleep_switch.size() < switches) {
    throw std::runtime_error("bench switch: only " + std::to_string(sleep_switch.size()) +
                             " of the calls needed a switch: the card held all three models");
  }
  std::cerr << "bench switch: room for the " << sleep_switch.size()
            << " switches made by: " << describe_steps(steps) << "\n";

  // The same switches by reaping the least recently used worker and starting the next fresh.
  for (const char* env : kEnvs) reap_and_wait(pool, env, 0, 0);
  std::deque<std::string> on_card{kEnvs[0], kEnvs[1]};
  for (const auto& env : on_card) load(pool, env);
  std::vector<double> reap_switch;
  std::map<std::string, int> other_steps;
  // Each of these starts a worker and builds 10 GiB afresh: three tell the story in a run that
  // fits the GPU machine's command limit.
  const std::size_t reap_switches = std::min<std::size_t>(switches, 3);
  for (std::size_t i = 0; i < reap_switches; ++i) {
    const std::string env = kEnvs[(i + 2) % kEnvs.size()];
    const std::string victim = on_card.front();
    const auto free_before = card_free(pool);
    const auto before = workers_now(pool);
    const auto start = Clock::now();
    reap_and_wait(pool, victim, free_before, kModel - kModel / 10);
    load(pool, env);
    reap_switch.push_back(elapsed<std::milli>(start));
    count_steps(before, workers_now(pool), {env, victim}, other_steps);
    on_card.pop_front();
    on_card.push_back(env);
  }
  if (!other_steps.empty()) {
    std::cerr << "bench switch: while reaping, admission also took room from the other worker: "
              << describe_steps(other_steps) << "\n";
  }

  // One process, one model, moved out and back.
  for (const char* env : kEnvs) reap_and_wait(pool, env, 0, 0);
  auto move_in_process = [&](bool pinned) {
    const auto moved = pool.call(kEnvs[0], std::string(kStages) + "in_process_move",
                                 {kModel, move_rounds, 40, pinned})
                           .get();
    if (!moved.value("intact", false)) {
      throw std::runtime_error("bench switch: the in-process move changed the model: " +
                               moved.dump());
    }
    if (pinned && moved.at("pin_ms").is_number()) {
      std::cerr << "bench switch: pinning the in-process model's host copy took "
                << moved.at("pin_ms").get<double>() << " ms, once, before its rounds\n";
    }
    return moved.at("switch_ms").get<std::vector<double>>();
  };
  auto move_ms = move_in_process(false);
  auto pinned_move_ms = move_in_process(true);

  return {
      with_target(summarize("switch.sleep_per_switch", "ms", sleep_switch)),
      with_target(summarize("switch.reap_and_start", "ms", reap_switch)),
      with_target(summarize("switch.in_process_move", "ms", move_ms)),
      with_target(summarize("switch.in_process_move_pinned", "ms", pinned_move_ms)),
  };
}

}  // namespace isohost::bench
