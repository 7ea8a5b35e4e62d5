#pragma once

// The control socket of a running host: JSON lines over a Unix socket (mode 0600, the peer's
// uid checked with SO_PEERCRED), never pickle. One request per line, one answer per line:
//
//   -> {"op": "call", "env": "math", "target": "operator:add", "args": [1, 2]}
//   <- {"ok": true, "value": 3}
//   -> {"op": "ps"}
//   <- {"ok": true, "value": {"host": {...}, "workers": [...]}}
//   -> {"op": "nonsense"}
//   <- {"ok": false, "error": {"kind": "BadRequest", "message": "unknown op 'nonsense'; ..."}}
//
// Requests: call, ps, release, reap, hibernate, wake, shutdown. Runs on the pool's event loop.

#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>

#include <memory>
#include <string>

#include "pool/pool.hpp"

namespace isohost::control {

// Open connections and the bytes of their unfinished lines (control_server.cpp).
struct ConnectionBooks;

class ControlServer {
 public:
  // Binds `socket_path`. A stale socket file (no one answering) is replaced; a live one, or a
  // path that is not a socket, is refused with isohost::Error(control_error), as is an empty or
  // too long path (check_socket_path), before anything is touched.
  ControlServer(pool::Pool& pool, std::string socket_path);
  ~ControlServer();

  // Must run on the pool's loop thread.
  void start();
  // Closes the socket and removes its file; each open connection reads no more and ends once
  // its answers are written, so an idle client cannot keep a stopped host alive.
  void stop();

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void accept();
  void on_accept_error(const asio::error_code& ec);

  pool::Pool& pool_;
  std::string path_;
  asio::local::stream_protocol::acceptor acceptor_;
  // After a failed accept (EMFILE, ENFILE, ECONNABORTED), the next is tried after a pause
  // rather than never: descriptors run out for a while, not for good.
  asio::steady_timer accept_retry_;
  bool accept_failing_ = false;
  // What open connections hold, shared with each (a connection may outlive the server).
  std::shared_ptr<ConnectionBooks> books_;
};

// Limits of the socket (docs/lifecycle.md, "Control socket"); past each, the connection is
// answered with a BadRequest that names the limit and closed, and the host serves on.
// The longest request line.
inline constexpr std::size_t kMaxRequestBytes = 16u << 20;
// Unfinished request lines of all connections together: without it, a hundred clients each
// sending most of a line would hold gigabytes of the host's memory.
inline constexpr std::size_t kMaxUnfinishedBytes = 64u << 20;
// Connections open at once.
inline constexpr std::size_t kMaxConnections = 256;

}  // namespace isohost::control
