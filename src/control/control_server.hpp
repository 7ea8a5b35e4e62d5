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
// Requests: call, ps, release, reap, shutdown. Runs on the pool's event loop.

#include <asio/local/stream_protocol.hpp>

#include <memory>
#include <string>

#include "pool/pool.hpp"

namespace isohost::control {

class ControlServer {
 public:
  // Binds `socket_path`. A stale socket file (no one answering) is replaced; a live one, or a
  // path that is not a socket, is refused with worker::Error(control_error).
  ControlServer(pool::Pool& pool, std::string socket_path);
  ~ControlServer();

  // Must run on the pool's loop thread.
  void start();
  void stop();

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void accept();

  pool::Pool& pool_;
  std::string path_;
  asio::local::stream_protocol::acceptor acceptor_;
};

// The longest request line accepted; past it the connection is answered with an error and
// closed.
inline constexpr std::size_t kMaxRequestBytes = 64u << 20;

}  // namespace isohost::control
