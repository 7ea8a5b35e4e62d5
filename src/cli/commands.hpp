#pragma once

// Each `isohost` subcommand registers its options on the CLI11 app together with the function
// that runs it; main.cpp runs the one the user named.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace isohost::cli {

// A subcommand and the function that runs it, returning the exit code.
using Commands = std::vector<std::pair<CLI::App*, std::function<int()>>>;

void add_call_command(CLI::App& app, Commands& commands);
void add_serve_command(CLI::App& app, Commands& commands);
void add_control_commands(CLI::App& app, Commands& commands);  // ps, release, reap, shutdown
void add_bench_command(CLI::App& app, Commands& commands);
void add_footprint_command(CLI::App& app, Commands& commands);
void add_top_command(CLI::App& app, Commands& commands);  // the live view

// Exit codes shared by the subcommands.
inline constexpr int kExitFailure = 1;  // the request failed: the error is on stderr
inline constexpr int kExitUsage = 2;    // bad command line or configuration

// Prints "isohost: Kind: message" on stderr.
void print_error(const std::string& kind, const std::string& message);

}  // namespace isohost::cli
