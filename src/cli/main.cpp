#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>

#include "cli/commands.hpp"
#include "error/error.hpp"

namespace isohost::cli {

void print_error(const std::string& kind, const std::string& message) {
  std::cerr << "isohost: " << kind << ": " << message << std::endl;
}

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
