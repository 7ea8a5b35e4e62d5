#pragma once

// isohost-web as a child of `serve --metrics ADDR --http ADDR` (docs/live-view.md): the
// metrics and page server, a program of its own because its libraries exist in Debian only as
// shared ones, which build/isohost must not need. It reads the pool through the control
// socket like any client.
//
//   WebSidecar web(pool.io(), {.socket = path, .http = address});  // throws, naming the cause
//   for (const auto& l : web.listeners()) spdlog::info("{}: {}", l.name, l.url);
//   web.watch();                                // its stderr to the log; its death logged
//   pool.on_stopped([&web] { web.unwatch(); });
//   pool.wait_until_stopped();
//   web.stop();                                 // SIGTERM, grace, SIGKILL; reaped
//
// Thread note: construct it on a thread that lives as long as the host (serve's main thread):
// the child's death signal (PR_SET_PDEATHSIG, SIGKILL) fires when the spawning thread ends,
// so a host killed with SIGKILL leaves no isohost-web behind.

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "control/listen_address.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::worker {
class OutputPipe;
}

namespace isohost::cli {

struct WebSidecarOptions {
  // The program; empty: isohost-web in the directory of this binary (/proc/self/exe).
  std::string program;
  // The host's control socket, passed on as --socket.
  std::string socket;
  // Where to serve /metrics and the page; at least one.
  std::optional<control::ListenAddress> metrics;
  std::optional<control::ListenAddress> http;
  // How long it may take to say `ready` (it binds, and asks the host once).
  std::chrono::milliseconds ready_timeout{10000};
  // Between SIGTERM and SIGKILL at stop().
  std::chrono::milliseconds stop_grace{2000};
};

// What it listens on, from its `listening NAME URL` lines: {"metrics", "http://.../metrics"}.
struct WebListener {
  std::string name;
  std::string url;
};

// Why isohost-web could not start, in words a user can act on: the program is missing, or it
// said why it stopped ("cannot listen on 127.0.0.1:9100: Address already in use").
class WebSidecarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class WebSidecar {
 public:
  // Spawns isohost-web and waits until it says `ready`. Throws WebSidecarError, with the child
  // ended and reaped, when it cannot be found, ends first, or stays silent past the timeout.
  WebSidecar(asio::io_context& io, WebSidecarOptions options);
  // stop(), unless done already.
  ~WebSidecar();
  WebSidecar(const WebSidecar&) = delete;
  WebSidecar& operator=(const WebSidecar&) = delete;

  [[nodiscard]] const std::vector<WebListener>& listeners() const { return listeners_; }
  [[nodiscard]] pid_t pid() const { return pid_; }

  // Any thread: from now on the loop logs each line isohost-web writes on stderr, and logs it
  // as an error should it end while the pool serves (which serves on without it).
  void watch();
  // Loop thread: stops watching, so that the loop can finish (from the pool's on_stopped).
  void unwatch();
  // Not while the loop watches: SIGTERM, up to stop_grace for it to end, SIGKILL, reaped.
  // Idempotent; nothing to do when the watch saw it end.
  void stop();

 private:
  asio::io_context& io_;
  WebSidecarOptions options_;
  pid_t pid_ = -1;
  wire::UniqueFd pidfd_;
  wire::UniqueFd stderr_;
  std::vector<WebListener> listeners_;
  // Watching (loop thread only).
  std::unique_ptr<asio::posix::stream_descriptor> death_;
  std::shared_ptr<worker::OutputPipe> relay_;
  bool unwatched_ = false;
  bool reaped_ = false;
};

// isohost-web's path: beside this binary.
std::string default_web_program();

}  // namespace isohost::cli
