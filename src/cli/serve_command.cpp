#include <asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "control/control_server.hpp"
#include "pool/pool.hpp"

namespace isohost::cli {
namespace {

struct ServeOptions {
  std::string config;
  std::string socket;
};

int run_serve(const ServeOptions& o) {
  pool::Pool pool(pool::load_config(o.config));
  control::ControlServer server(pool, o.socket);
  asio::signal_set signals(pool.io(), SIGINT, SIGTERM);
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
  spdlog::info("serving on {} (host pid {})", o.socket, ::getpid());
  pool.wait_until_stopped();
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand("serve", "Run a host with a control socket until told to stop");
  // Not CLI::ExistingFile: load_config names the file and what is wrong with it.
  sub->add_option("--config", options->config, "TOML file")->required();
  sub->add_option("--socket", options->socket, "path of the control socket")->required();
  commands.emplace_back(sub, [options] { return run_serve(*options); });
}

}  // namespace isohost::cli
