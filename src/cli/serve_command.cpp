#include <asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/web_sidecar.hpp"
#include "control/control_server.hpp"
#include "control/listen_address.hpp"
#include "control/socket_path.hpp"
#include "error/error.hpp"
#include "pool/pool.hpp"

namespace isohost::cli {
namespace {

struct ServeOptions {
  std::string config;
  std::string socket;
  // ADDR (PORT or HOST:PORT) of /metrics and of the page; empty: not served (docs/live-view.md).
  std::string metrics;
  std::string http;
};

// A live-view address, checked before the pool starts. Loopback unless a host is named; one
// that is not loopback is served as asked, with a warning.
std::optional<control::ListenAddress> listen_option(const char* flag, const std::string& text) {
  if (text.empty()) return std::nullopt;
  control::ListenAddress address;
  try {
    address = control::parse_listen_address(text);
  } catch (const control::ListenAddressError& e) {
    throw isohost::Error(isohost::ErrorKind::config_error, std::string(flag) + " " + e.what());
  }
  if (!address.loopback()) {
    spdlog::warn(
        "{} {} is not a loopback address: anyone who can reach it can read the pool's state "
        "(environments, pids, states, memory, call counts)",
        flag, address.to_string());
  }
  return address;
}

int run_serve(const ServeOptions& o) {
  // Before the pool starts, so a bad path is the first and only thing said (a prestarted
  // zygote's start would otherwise come first, and its end be reported as a failure).
  control::check_socket_path(o.socket);
  const auto metrics_at = listen_option("--metrics", o.metrics);
  const auto http_at = listen_option("--http", o.http);
  pool::Pool pool(pool::load_config(o.config));
  control::ControlServer server(pool, o.socket);
  // Each of these shuts the host down as `isohost shutdown` does, so the socket file is removed
  // and the live view's server reaped: SIGHUP is the terminal closing, SIGQUIT a Ctrl-\.
  asio::signal_set signals(pool.io(), SIGINT, SIGTERM, SIGHUP);
  signals.add(SIGQUIT);
  asio::post(pool.io(), [&] {
    server.start();
    signals.async_wait([&pool](const asio::error_code& ec, int signal) {
      if (ec) return;
      spdlog::info("received signal {}: shutting down", signal);
      pool.request_shutdown();
    });
  });
  pool.on_stopped([&] {
    server.stop();
    asio::error_code ignored;
    signals.cancel(ignored);
  });
  // Spawned from this thread, which lives as long as the host: its death signal is this
  // thread's end (web_sidecar.hpp).
  std::unique_ptr<WebSidecar> web;
  if (metrics_at || http_at) {
    try {
      web = std::make_unique<WebSidecar>(
          pool.io(), WebSidecarOptions{.socket = o.socket, .metrics = metrics_at, .http = http_at});
    } catch (const WebSidecarError&) {
      spdlog::error("the live view did not start; shutting the pool down");
      pool.request_shutdown();
      pool.wait_until_stopped();
      throw;
    }
    for (const auto& l : web->listeners()) spdlog::info("{}: {}", l.name, l.url);
    web->watch();
    pool.on_stopped([&web] { web->unwatch(); });
  }
  spdlog::info("serving on {} (host pid {})", o.socket, ::getpid());
  pool.wait_until_stopped();
  if (web) web->stop();
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand("serve", "Run a host with a control socket until told to stop");
  // Not CLI::ExistingFile: load_config names the file and what is wrong with it.
  sub->add_option("--config", options->config, "TOML file")->required();
  sub->add_option("--socket", options->socket, "path of the control socket")->required();
  sub->add_option("--metrics", options->metrics,
                  "serve Prometheus metrics at PORT or HOST:PORT (127.0.0.1 unless a host is "
                  "named; port 0: any free one)");
  sub->add_option("--http", options->http,
                  "serve the live page at PORT or HOST:PORT, as --metrics");
  commands.emplace_back(sub, [options] { return run_serve(*options); });
}

}  // namespace isohost::cli
