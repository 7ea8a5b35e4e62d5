#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "control/control_client.hpp"
#include "error/error.hpp"

namespace isohost::cli {
namespace {

struct ControlOptions {
  std::string socket;
  std::string env;
  bool json = false;
};

nlohmann::ordered_json ask(const std::string& socket, const nlohmann::ordered_json& request) {
  const auto reply = control::send_control_request(socket, request);
  if (!reply.value("ok", false)) {
    throw isohost::Error::from_json(reply.value("error", nlohmann::ordered_json::object()));
  }
  return reply.value("value", nlohmann::ordered_json());
}

std::string cell(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string mb(const nlohmann::ordered_json& bytes) {
  return bytes.is_number() ? fmt::format("{:.0f}M", bytes.get<double>() / 1e6) : "-";
}

std::string mib(const nlohmann::ordered_json& bytes) {
  return bytes.is_number() ? fmt::format("{:.0f}Mi", bytes.get<double>() / 1048576.0) : "?";
}

// One line per zygote, with the workers forked from it (their "origin" is "zygote").
void print_zygotes(const nlohmann::ordered_json& ps) {
  for (const auto& z : ps.value("zygotes", nlohmann::ordered_json::array())) {
    std::string forked;
    for (const auto& w : ps["workers"]) {
      if (w.value("zygote_pid", nlohmann::ordered_json()) == z["pid"] && z["pid"] != -1) {
        forked += (forked.empty() ? "" : ", ") + cell(w["pid"]);
      }
    }
    std::string preload;
    for (const auto& m : z["preload"]) preload += (preload.empty() ? "" : ",") + cell(m);
    std::cout << fmt::format(
        "zygote of '{}': pid {}, {}, preloaded {}, {} forks, PSS {}; workers from it: {}{}\n",
        cell(z["env"]), cell(z["pid"]), cell(z["state"]), preload, cell(z["forks"]),
        mb(z.value("pss", nlohmann::ordered_json())), forked.empty() ? "none" : forked,
        z["refusal"].is_string() ? "; refused: " + cell(z["refusal"]) : "");
  }
}

// RAM in MB, VRAM in MiB ("?" where it cannot be known), as the seed writes them.
void print_ps_table(const nlohmann::ordered_json& ps) {
  const auto& host = ps["host"];
  std::cout << fmt::format(
      "host pid {}: PSS {}, private {}, VRAM {} (the host holds no CUDA context)\n",
      cell(host["pid"]), mb(host.value("pss", nlohmann::ordered_json())),
      mb(host.value("private", nlohmann::ordered_json())),
      mib(host.value("vram", nlohmann::ordered_json())));
  for (const auto& d : ps.value("devices", nlohmann::ordered_json::array())) {
    auto field = [&](const char* key) { return d.value(key, nlohmann::ordered_json()); };
    std::cout << fmt::format(
        "GPU {} {}: total {}, used {}, free {}; workers {} (fixed {}, held {}, reclaimable {}); "
        "others {}; reserve {}, pending {}, grantable {}\n",
        cell(d["index"]), cell(d["name"]), mib(d["total"]), mib(d["used"]), mib(d["free"]), mib(field("workers_vram")),
        mib(field("fixed")), mib(field("held")), mib(field("reclaimable")), mib(field("foreign")),
        mib(field("reserve")), mib(field("pending")), mib(field("grantable")));
  }
  if (ps.contains("gpu")) std::cout << "GPU: " << cell(ps["gpu"]) << "\n";
  std::cout << fmt::format(
      "{:<14} {:>8} {:>4} {:<11} {:>8} {:>6} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10}\n", "ENV",
      "PID", "GEN", "STATE", "IDLE(s)", "CALLS", "PSS", "PRIVATE", "VRAM", "FIXED-RAM",
      "FIXED-VRAM", "RECLAIM", "IN-RAM");
  for (const auto& w : ps["workers"]) {
    auto field = [&](const char* key) { return w.value(key, nlohmann::ordered_json()); };
    // IN-RAM: the host RAM its GPU state now takes: the models its sleep moved, in MiB as they
    // were on the card, and the hibernation's RSS growth.
    const auto hibernation = field("hibernation");
    const auto sleep = field("sleep");
    std::string held = "-";
    if (sleep.is_object()) held = mib(sleep.value("bytes", nlohmann::ordered_json()));
    if (hibernation.is_object()) {
      const auto grown = mb(hibernation.value("ram_grown", nlohmann::ordered_json()));
      held = held == "-" ? grown : held + "+" + grown;
    }
    std::cout << fmt::format("{:<14} {:>8} {:>4} {:<11} {:>8.1f} {:>6} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10}\n",
                             cell(w["env"]), cell(w["pid"]), cell(w["generation"]), cell(w["state"]),
                             w.value("idle_seconds", 0.0), cell(w["calls"]), mb(field("pss")),
                             mb(field("private")), mib(field("vram")), mb(field("fixed_ram")),
                             mib(field("fixed_vram")), mib(field("reclaimable_vram")), held);
  }
  if (ps["workers"].empty()) std::cout << "(no workers running)\n";
  print_zygotes(ps);
}

}  // namespace

void add_control_commands(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ControlOptions>();
  auto* ps = app.add_subcommand("ps", "List a running host's workers");
  ps->add_option("--socket", options->socket, "control socket of a running host")->required();
  ps->add_flag("--json", options->json, "print JSON");
  commands.emplace_back(ps, [options] {
    const auto value = ask(options->socket, {{"op", "ps"}});
    if (options->json) {
      std::cout << value.dump(2) << std::endl;
    } else {
      print_ps_table(value);
    }
    return 0;
  });
  const std::pair<const char*, const char*> env_ops[] = {
      {"release", "Ask an environment's worker to drop its caches"},
      {"reap", "End an environment's worker once it is idle"},
      {"hibernate",
       "Move an idle worker's whole GPU state into its host RAM (docs/hibernation.md)"},
      {"sleep",
       "Move an idle worker's models into its host RAM at the bus's speed (docs/sleep.md)"},
      {"wake", "Put an asleep or hibernated worker's GPU state back without a call"},
  };
  for (const auto& [op, help] : env_ops) {
    auto* sub = app.add_subcommand(op, help);
    sub->add_option("--socket", options->socket, "control socket of a running host")->required();
    sub->add_option("env", options->env, "environment name")->required();
    // `op = op`: clang before 16 (clang-tidy's on Debian 12) cannot capture a structured binding.
    commands.emplace_back(sub, [options, op = op] {
      const auto answer = ask(options->socket, {{"op", op}, {"env", options->env}});
      std::cout << answer.dump() << std::endl;
      // hibernate, sleep and wake that did not happen say why, and fail, so scripts can tell.
      const std::string name = op;
      const std::string done = name == "hibernate" ? "hibernated"
                               : name == "sleep"   ? "asleep"
                                                   : "woken";
      if ((name == "hibernate" || name == "sleep" || name == "wake") &&
          !answer.value(done, false)) {
        std::cerr << op << " " << options->env << ": " << answer.value("reason", std::string()) << std::endl;
        return 1;
      }
      return 0;
    });
  }
  auto* stop = app.add_subcommand("shutdown", "Stop a running host and all its workers");
  stop->add_option("--socket", options->socket, "control socket of a running host")->required();
  commands.emplace_back(stop, [options] {
    ask(options->socket, {{"op", "shutdown"}});
    return 0;
  });
}

}  // namespace isohost::cli
