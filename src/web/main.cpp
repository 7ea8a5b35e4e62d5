// isohost-web: the live view's HTTP side (docs/live-view.md), started by `isohost serve
// --metrics ADDR --http ADDR` beside the host, or by hand:
//
//   isohost-web --socket PATH [--metrics ADDR] [--http ADDR]
//
// It reads the pool only through the control socket, like any client. Once every listener is
// bound it prints one line per listener and then `ready` on stdout:
//
//   listening metrics http://127.0.0.1:41234/metrics
//   listening page http://127.0.0.1:41235/
//   ready
//
// Start errors (a bad or busy address, a host that does not answer, missing page files) go to
// stderr and exit 2. It ends when its parent does (serve spawns it with PR_SET_PDEATHSIG, and
// spawn checks getppid after setting it) and when the control socket is gone for good.

#include <signal.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "control/listen_address.hpp"
#include "web/host_client.hpp"
#include "web/listener.hpp"
#include "web/metric_families.hpp"
#include "web/routes.hpp"
#include "web/status_history.hpp"

namespace isohost::web {
namespace {

constexpr int kExitStart = 2;
// One sample a second, ten minutes kept.
constexpr std::chrono::seconds kInterval{1};
constexpr std::size_t kHistoryPoints = 600;
// Samples in a row that find no one on the socket before isohost-web ends: a host restarting
// on the same path has a few seconds to come back.
constexpr int kGoneAfter = 3;

struct Options {
  std::string socket;
  std::string metrics;
  std::string http;
  std::string assets;
};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::filesystem::path default_assets() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path("web") : exe.parent_path() / "web";
}

class StartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every second until the host is gone: a sample into `history` when the page is served, else
// only a look at the socket (so that a metrics-only sidecar asks the host nothing between
// scrapes). Returns once kGoneAfter looks in a row find no one listening.
void watch_host(const std::string& socket, StatusHistory* history) {
  auto next = std::chrono::steady_clock::now();
  int gone = 0;
  bool failing = false;
  while (gone < kGoneAfter) {
    next = std::max(next + kInterval, std::chrono::steady_clock::now());
    std::this_thread::sleep_until(next);
    if (history == nullptr) {
      gone = host_gone(socket) ? gone + 1 : 0;
      continue;
    }
    try {
      history->record(fetch_metrics(socket), unix_now());
      if (failing) std::cerr << "isohost-web: the host answers again" << std::endl;
      failing = false;
      gone = 0;
    } catch (const HostUnavailable& e) {
      history->record_failure(e.what(), unix_now());
      if (!failing) std::cerr << "isohost-web: no sample: " << e.what() << std::endl;
      failing = true;
      gone = e.gone() ? gone + 1 : 0;
    }
  }
  std::cerr << "isohost-web: no host listens on " << socket << " any more; stopping" << std::endl;
}

struct Listener {
  httplib::Server server;
  std::thread thread;
};

int run(const Options& o) {
  if (o.metrics.empty() && o.http.empty()) {
    throw StartError("nothing to serve: give --metrics ADDR, --http ADDR or both");
  }
  std::optional<control::ListenAddress> metrics_at;
  std::optional<control::ListenAddress> http_at;
  try {
    if (!o.metrics.empty()) metrics_at = control::parse_listen_address(o.metrics);
    if (!o.http.empty()) http_at = control::parse_listen_address(o.http);
  } catch (const control::ListenAddressError& e) {
    throw StartError(e.what());
  }
  HostCollectable host(o.socket);
  std::optional<StatusHistory> history;
  std::map<std::string, Asset> assets;
  try {
    const auto first = fetch_metrics(o.socket);
    if (http_at) {
      history.emplace(kHistoryPoints, std::chrono::duration<double>(kInterval).count());
      history->record(first, unix_now());
      assets = load_assets(o.assets.empty() ? default_assets() : std::filesystem::path(o.assets));
    }
  } catch (const std::exception& e) {
    throw StartError(e.what());
  }

  std::vector<std::unique_ptr<Listener>> listeners;
  std::vector<std::string> lines;
  try {
    if (metrics_at) {
      auto& l = *listeners.emplace_back(std::make_unique<Listener>());
      add_metrics_routes(l.server, host);
      const int port = bind_server(l.server, *metrics_at);
      lines.push_back("listening metrics " + control::http_url(metrics_at->host, port, "/metrics"));
    }
    if (http_at) {
      auto& l = *listeners.emplace_back(std::make_unique<Listener>());
      add_page_routes(l.server, std::move(assets), *history);
      const int port = bind_server(l.server, *http_at);
      lines.push_back("listening page " + control::http_url(http_at->host, port, "/"));
    }
  } catch (const ListenError& e) {
    throw StartError(e.what());
  }
  for (auto& l : listeners) {
    l->thread = std::thread([&server = l->server] { server.listen_after_bind(); });
  }
  for (const auto& line : lines) std::cout << line << '\n';
  std::cout << "ready" << std::endl;

  watch_host(o.socket, history ? &*history : nullptr);
  for (auto& l : listeners) l->server.stop();
  for (auto& l : listeners) l->thread.join();
  return 0;
}

}  // namespace
}  // namespace isohost::web

int main(int argc, char** argv) {
  using namespace isohost::web;
  // A client that goes away mid-answer must not end the process.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"isohost-web: the read-only metrics and page server of an isohost host"};
  Options o;
  app.add_option("--socket", o.socket, "the host's control socket")->required();
  app.add_option("--metrics", o.metrics,
                 "serve /metrics (Prometheus) on PORT or HOST:PORT; host 127.0.0.1 unless named, "
                 "port 0 for any free one");
  app.add_option("--http", o.http, "serve the page on PORT or HOST:PORT, as --metrics");
  app.add_option("--assets", o.assets, "the page's files (default: web/ beside this program)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitStart;
  }
  try {
    return run(o);
  } catch (const StartError& e) {
    std::cerr << "isohost-web: " << e.what() << std::endl;
    return kExitStart;
  }
}
