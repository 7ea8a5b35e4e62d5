#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <iostream>

#include "cli/commands.hpp"
#include "error/error.hpp"

namespace isohost::cli {

void print_error(const std::string& kind, const std::string& message) {
  std::cerr << "isohost: " << kind << ": " << message << std::endl;
}

namespace {

// CLI11 checks what is required before it refuses words it did not expect, so `isohost bogus`
// said "A subcommand is required" and `serve --config c.toml extra` "--socket is required". The
// words left over, when there are any, are the better account of what went wrong: an unknown
// command when no command was recognised, else the unexpected words themselves, in the order
// given (CLI11 lists a command's leftovers after those of the app).
CLI::ExtrasError leftover_error(const CLI::App& app, int argc, char** argv) {
  auto left = app.remaining(true);
  std::vector<std::string> extras;
  for (int i = 1; i < argc; ++i) {
    const auto it = std::find(left.begin(), left.end(), argv[i]);
    if (it == left.end()) continue;
    extras.emplace_back(*it);
    left.erase(it);
  }
  extras.insert(extras.end(), left.begin(), left.end());  // any CLI11 rewrote (--a=b)
  if (app.get_subcommands().empty() && !extras.front().starts_with("-")) {
    std::string known;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    return CLI::ExtrasError("unknown command '" + extras.front() + "' (known: " + known + ")",
                            CLI::ExitCodes::ExtrasError);
  }
  // Not ExtrasError(extras), which lists them backwards.
  return CLI::ExtrasError(std::string("The following ") +
                              (extras.size() > 1 ? "arguments were" : "argument was") +
                              " not expected: " + CLI::detail::join(extras, " "),
                          CLI::ExitCodes::ExtrasError);
}

}  // namespace
}  // namespace isohost::cli

int main(int argc, char** argv) {
  using namespace isohost::cli;
  // Log lines go to stderr so that stdout carries only results.
  spdlog::set_default_logger(spdlog::stderr_color_mt("isohost"));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"isohost: runs Python ML code in isolated worker processes and shows every byte "
               "they hold"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("isohost ") + ISOHOST_VERSION);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  Commands commands;
  add_call_command(app, commands);
  add_serve_command(app, commands);
  add_control_commands(app, commands);
  add_bench_command(app, commands);
  add_footprint_command(app, commands);
  add_top_command(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0 && !app.remaining(true).empty()) {
      app.exit(leftover_error(app, argc, argv));
      return kExitUsage;
    }
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  // Commands that print a report keep the log to warnings unless asked otherwise.
  const bool quiet_by_default = app.got_subcommand("footprint") || app.got_subcommand("bench");
  if (app.get_option("--log-level")->count() == 0 && quiet_by_default) log_level = "warn";
  spdlog::set_level(spdlog::level::from_str(log_level));
  for (auto& [sub, run] : commands) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const isohost::Error& e) {
      print_error(e.kind_name(), e.what());
      return e.kind() == isohost::ErrorKind::config_error ? kExitUsage : kExitFailure;
    } catch (const std::exception& e) {
      print_error("Error", e.what());
      return kExitFailure;
    }
  }
  return kExitUsage;
}
