#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "control/control_client.hpp"
#include "worker/error.hpp"

namespace isohost::cli {
namespace {

struct ControlOptions {
  std::string socket;
  std::string env;
  bool json = false;
};

nlohmann::json ask(const std::string& socket, const nlohmann::json& request) {
  const auto reply = control::send_control_request(socket, request);
  if (!reply.value("ok", false)) {
    throw worker::Error::from_json(reply.value("error", nlohmann::json::object()));
  }
  return reply.value("value", nlohmann::json());
}

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void print_ps_table(const nlohmann::json& ps) {
  std::cout << fmt::format("host pid {}\n", cell(ps["host"]["pid"]));
  std::cout << fmt::format("{:<16} {:>8} {:>4} {:<9} {:>9} {:>7}\n", "ENV", "PID", "GEN", "STATE",
                           "IDLE(s)", "CALLS");
  for (const auto& w : ps["workers"]) {
    std::cout << fmt::format("{:<16} {:>8} {:>4} {:<9} {:>9.1f} {:>7}\n", cell(w["env"]),
                             cell(w["pid"]), cell(w["generation"]), cell(w["state"]),
                             w.value("idle_seconds", 0.0), cell(w["calls"]));
  }
  if (ps["workers"].empty()) std::cout << "(no workers running)\n";
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
  for (const char* op : {"release", "reap"}) {
    auto* sub = app.add_subcommand(op, std::string(op) == "release"
                                            ? "Ask an environment's worker to drop its caches"
                                            : "End an environment's worker once it is idle");
    sub->add_option("--socket", options->socket, "control socket of a running host")->required();
    sub->add_option("env", options->env, "environment name")->required();
    commands.emplace_back(sub, [options, op] {
      std::cout << ask(options->socket, {{"op", op}, {"env", options->env}}).dump() << std::endl;
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
