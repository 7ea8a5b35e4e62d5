#include "control/control_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>
#include <spdlog/spdlog.h>

#include "control/control_request.hpp"

namespace isohost::control {
namespace {

using asio::local::stream_protocol;
using worker::Error;
using worker::ErrorKind;

// Removes a socket file left by a host that died; refuses to touch anything else.
void clear_stale_socket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) {
    throw Error(ErrorKind::control_error, "'" + path + "' exists and is not a socket");
  }
  asio::io_context probe_io;
  stream_protocol::socket probe(probe_io);
  asio::error_code ec;
  probe.connect(stream_protocol::endpoint(path), ec);
  if (!ec) throw Error(ErrorKind::control_error, "another host is already serving on '" + path + "'");
  // Only a refused connection proves the file stale; anything else (EACCES) is not ours to touch.
  if (ec != asio::error::connection_refused) {
    throw Error(ErrorKind::control_error, "cannot check '" + path + "': " + ec.message());
  }
  ::unlink(path.c_str());
}

// One client connection: reads a line, answers it, reads the next.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(pool::Pool& pool, stream_protocol::socket socket)
      : pool_(pool), socket_(std::move(socket)), buffer_(kMaxRequestBytes) {}

  void start() {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::geteuid()) {
      spdlog::warn("control: refused a client of uid {} (the host runs as uid {})", cred.uid,
                   ::geteuid());
      answer_and_close(failure(Error(ErrorKind::control_error,
                                     "refused: peer uid " + std::to_string(cred.uid) +
                                         " is not the host's uid " + std::to_string(::geteuid()))));
      return;
    }
    read();
  }

 private:
  void read() {
    asio::async_read_until(socket_, buffer_, '\n',
                           [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
                             self->on_line(ec, n);
                           });
  }

  void on_line(const asio::error_code& ec, std::size_t n) {
    if (ec == asio::error::not_found) {
      answer_and_close(failure(Error(ErrorKind::bad_request, "request line longer than the limit of " +
                                                                 std::to_string(kMaxRequestBytes) + " bytes")));
      return;
    }
    if (ec) return;  // the client went away
    std::string line(asio::buffers_begin(buffer_.data()),
                     asio::buffers_begin(buffer_.data()) + static_cast<std::ptrdiff_t>(n));
    buffer_.consume(n);
    handle_request(pool_, line, [self = shared_from_this()](const nlohmann::json& reply) {
      self->write(reply, /*then_close=*/false);
    });
  }

  void answer_and_close(const nlohmann::json& reply) { write(reply, /*then_close=*/true); }

  void write(const nlohmann::json& reply, bool then_close) {
    auto text = std::make_shared<std::string>(
        reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    asio::async_write(socket_, asio::buffer(*text),
                      [self = shared_from_this(), text, then_close](const asio::error_code& ec, std::size_t) {
                        if (ec || then_close) {
                          asio::error_code ignored;
                          self->socket_.close(ignored);
                          return;
                        }
                        self->read();
                      });
  }

  pool::Pool& pool_;
  stream_protocol::socket socket_;
  asio::streambuf buffer_;
};

}  // namespace

ControlServer::ControlServer(pool::Pool& pool, std::string socket_path)
    : pool_(pool), path_(std::move(socket_path)), acceptor_(pool.io()) {
  clear_stale_socket(path_);
  // The socket is created 0600 from the start: there is no moment when others may connect.
  const mode_t old_mask = ::umask(0177);
  asio::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(path_), ec);
  ::umask(old_mask);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw Error(ErrorKind::control_error, "cannot listen on '" + path_ + "': " + ec.message());
  }
}

ControlServer::~ControlServer() { stop(); }

void ControlServer::start() { accept(); }

void ControlServer::stop() {
  if (!acceptor_.is_open()) return;
  asio::error_code ignored;
  acceptor_.close(ignored);
  ::unlink(path_.c_str());
}

void ControlServer::accept() {
  acceptor_.async_accept([this](const asio::error_code& ec, stream_protocol::socket socket) {
    if (ec) return;  // closed
    std::make_shared<Session>(pool_, std::move(socket))->start();
    accept();
  });
}

}  // namespace isohost::control
