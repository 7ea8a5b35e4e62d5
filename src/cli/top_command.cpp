// `isohost top`: a live view of a running host (top_screen.cpp), or one plain frame.

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/top_frame.hpp"
#include "cli/top_screen.hpp"
#include "control/control_client.hpp"
#include "control/socket_path.hpp"
#include "error/error.hpp"
#include "probe/meminfo.hpp"
#include "probe/probe_error.hpp"

namespace isohost::cli {
namespace {

struct TopOptions {
  std::string socket;
  bool once = false;
  double interval_seconds = 1.0;
};

// The width of a plain frame: the terminal's when there is one, else $COLUMNS, else this.
constexpr int kPlainWidth = 120;

int plain_width() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int n = std::atoi(columns);
    if (n > 0) return n;
  }
  return kPlainWidth;
}

// Asks the host for its metrics. A host from before the metrics op answers that it does not
// know it; from then on this asks it for ps, which gives the same status without counters.
class MetricsSource {
 public:
  explicit MetricsSource(std::string socket) : socket_(std::move(socket)) {}

  // Throws isohost::Error when the host cannot be reached or refuses.
  nlohmann::ordered_json fetch() {
    auto metrics = fetch_from_host();
    add_system_memory(metrics);
    return metrics;
  }

 private:
  nlohmann::ordered_json fetch_from_host() {
    if (!ps_only_) {
      const auto reply = control::send_control_request(socket_, {{"op", "metrics"}});
      if (!predates_metrics(reply)) return value_of(reply);
      ps_only_ = true;
    }
    return top::metrics_from_ps(value_of(control::send_control_request(socket_, {{"op", "ps"}})));
  }

  // The machine's RAM, where the host's status does not give it: read here, which is the same
  // machine, since the control socket is a Unix socket.
  static void add_system_memory(nlohmann::ordered_json& metrics) {
    if (!metrics.is_object() || !metrics.contains("status") || !metrics["status"].is_object())
      return;
    auto& status = metrics["status"];
    if (status.contains("system_memory")) return;
    try {
      const auto memory = probe::read_system_memory();
      status["system_memory"] = {{"total", memory.total}, {"available", memory.available}};
    } catch (const probe::ProbeError&) {
    }
  }

  static bool predates_metrics(const nlohmann::ordered_json& reply) {
    const auto& error = reply.contains("error") ? reply["error"] : nlohmann::ordered_json();
    const auto& message = error.is_object() && error.contains("message") ? error["message"]
                                                                         : nlohmann::ordered_json();
    return reply.value("ok", true) == false && message.is_string() &&
           message.get<std::string>().starts_with("unknown op 'metrics'");
  }

  static nlohmann::ordered_json value_of(const nlohmann::ordered_json& reply) {
    if (reply.contains("ok") && reply["ok"] == true)
      return reply.value("value", nlohmann::ordered_json());
    throw isohost::Error::from_json(reply.contains("error") ? reply["error"]
                                                            : nlohmann::ordered_json::object());
  }

  std::string socket_;
  std::atomic<bool> ps_only_{false};
};

int print_once(MetricsSource& source) {
  const top::Sample sample{.metrics = source.fetch(), .taken_at = top::Clock::now()};
  std::cout << top::plain_text(top::build_frame(nullptr, sample, {.width = plain_width()}))
            << std::flush;
  return 0;
}

int run_live(const TopOptions& options, const std::shared_ptr<MetricsSource>& source) {
  const std::string socket = options.socket;
  top::HostLink link{
      .metrics = [source] { return source->fetch(); },
      .act =
          [socket](const std::string& op, const std::string& env) {
            return top::outcome_text(
                op, env, control::send_control_request(socket, {{"op", op}, {"env", env}}));
          },
  };
  const auto interval = std::chrono::duration<double>(options.interval_seconds);
  return top::run_screen(
      link, {.interval = std::chrono::duration_cast<std::chrono::milliseconds>(interval)});
}

}  // namespace

void add_top_command(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<TopOptions>();
  auto* top = app.add_subcommand(
      "top", "A live view of a running host's devices and workers, with keys to act");
  top->add_option("--socket", options->socket, "control socket of a running host")->required();
  top->add_flag("--once", options->once,
                "print one plain frame and exit (also when stdout is not a terminal)");
  top->add_option("--interval", options->interval_seconds, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  commands.emplace_back(top, [options] {
    // Before the screen opens: a path that can never work is said once, not in every frame.
    control::check_socket_path(options->socket);
    auto source = std::make_shared<MetricsSource>(options->socket);
    if (options->once || !::isatty(STDOUT_FILENO) || !::isatty(STDIN_FILENO))
      return print_once(*source);
    return run_live(*options, source);
  });
}

}  // namespace isohost::cli
