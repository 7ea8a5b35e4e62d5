#include "control/control_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <exception>
#include <set>

#include <asio/streambuf.hpp>
#include <asio/write.hpp>
#include <spdlog/spdlog.h>

#include "control/control_request.hpp"
#include "control/socket_path.hpp"

namespace isohost::control {
namespace {

using asio::local::stream_protocol;

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

// Bytes asked of the socket per read.
constexpr std::size_t kReadChunk = 64u << 10;

class Session;

}  // namespace

struct ConnectionBooks {
  std::size_t connections = 0;
  std::size_t unfinished_bytes = 0;
  // Open connections, so that stopping the server ends them: a client that keeps its connection
  // open must not keep a host that was told to shut down alive.
  std::set<Session*> open;
};

namespace {

// One client connection: reads a line, answers it, reads the next.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(pool::Pool& pool, stream_protocol::socket socket, std::shared_ptr<ConnectionBooks> books)
      : pool_(pool), socket_(std::move(socket)), books_(std::move(books)) {
    ++books_->connections;
    books_->open.insert(this);
  }
  ~Session() {
    --books_->connections;
    books_->unfinished_bytes -= buffer_.size();
    books_->open.erase(this);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

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

  void answer_and_close(const nlohmann::ordered_json& reply) { write(reply, /*then_close=*/true); }

  // Reads no more: the pending read ends (end of file) and the session with it, once the
  // answers already being written have gone out.
  void stop_reading() {
    asio::error_code ignored;
    socket_.shutdown(stream_protocol::socket::shutdown_receive, ignored);
  }

 private:
  // Answers a complete line if one is buffered, else reads more, within the limits.
  void read() {
    const auto* data = static_cast<const char*>(buffer_.data().data());
    const std::string_view buffered(data, buffer_.size());
    if (const auto end = buffered.find('\n', scanned_); end != std::string_view::npos) {
      on_line(std::string(buffered.substr(0, end + 1)));
      return;
    }
    scanned_ = buffered.size();
    if (buffered.size() >= kMaxRequestBytes) {
      refuse("request line longer than the limit of " + std::to_string(kMaxRequestBytes) +
             " bytes");
      return;
    }
    const auto room = std::min(kReadChunk, kMaxRequestBytes - buffered.size());
    socket_.async_read_some(buffer_.prepare(room), [self = shared_from_this()](
                                                       const asio::error_code& ec, std::size_t n) {
      if (ec) return;  // the client went away
      self->buffer_.commit(n);
      self->books_->unfinished_bytes += n;
      if (self->books_->unfinished_bytes > kMaxUnfinishedBytes) {
        self->refuse("the host already holds " + std::to_string(kMaxUnfinishedBytes) +
                     " bytes of unfinished request lines from its clients (the limit)");
        return;
      }
      self->read();
    });
  }

  void on_line(std::string line) {
    buffer_.consume(line.size());
    books_->unfinished_bytes -= line.size();
    scanned_ = 0;
    handle_request(pool_, line, [self = shared_from_this()](const nlohmann::ordered_json& reply) {
      self->write(reply, /*then_close=*/false);
    });
  }

  void refuse(const std::string& why) {
    spdlog::warn("control: closed a connection: {}", why);
    answer_and_close(failure(Error(ErrorKind::bad_request, why)));
  }

  void write(const nlohmann::ordered_json& reply, bool then_close) {
    auto text = std::make_shared<std::string>(
        reply.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
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
  std::shared_ptr<ConnectionBooks> books_;
  asio::streambuf buffer_;
  // How much of buffer_ has been searched for a newline.
  std::size_t scanned_ = 0;
};

}  // namespace

ControlServer::ControlServer(pool::Pool& pool, std::string socket_path)
    : pool_(pool),
      path_(std::move(socket_path)),
      acceptor_(pool.io()),
      accept_retry_(pool.io()),
      books_(std::make_shared<ConnectionBooks>()) {
  check_socket_path(path_);
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

// stop() cancels the retry timer with asio's cancel(), which throws only where the reactor
// fails; a destructor must not throw, so such a failure is logged instead.
ControlServer::~ControlServer() {
  try {
    stop();
  } catch (const std::exception& e) {
    spdlog::error("control: stopping the server on '{}': {}", path_, e.what());
  }
}

void ControlServer::start() { accept(); }

void ControlServer::stop() {
  if (!acceptor_.is_open()) return;
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  ::unlink(path_.c_str());
  for (auto* session : books_->open) session->stop_reading();
}

void ControlServer::accept() {
  acceptor_.async_accept([this](const asio::error_code& ec, stream_protocol::socket socket) {
    if (!acceptor_.is_open()) return;  // stopped
    if (ec) {
      on_accept_error(ec);
      return;
    }
    if (accept_failing_) spdlog::info("control: accepting connections on '{}' again", path_);
    accept_failing_ = false;
    auto session = std::make_shared<Session>(pool_, std::move(socket), books_);
    if (books_->connections > kMaxConnections) {
      session->answer_and_close(
          failure(Error(ErrorKind::bad_request,
                        "the host already serves " + std::to_string(kMaxConnections) +
                            " control connections (the limit); try again when one closes")));
    } else {
      session->start();
    }
    accept();
  });
}

void ControlServer::on_accept_error(const asio::error_code& ec) {
  // Said once per spell of failures, not ten times a second.
  if (!accept_failing_) {
    spdlog::warn("control: accepting a connection on '{}' failed: {}; trying again every 100 ms",
                 path_, ec.message());
  }
  accept_failing_ = true;
  accept_retry_.expires_after(std::chrono::milliseconds(100));
  accept_retry_.async_wait([this](const asio::error_code& cancelled) {
    if (!cancelled && acceptor_.is_open()) accept();
  });
}

}  // namespace isohost::control
