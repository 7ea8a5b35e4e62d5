#include "control/control_client.hpp"

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>

#include "control/control_server.hpp"
#include "control/socket_path.hpp"
#include "error/error.hpp"
#include "wire/json_depth.hpp"

namespace isohost::control {

nlohmann::ordered_json send_control_request(const std::string& socket_path,
                                            const nlohmann::ordered_json& request) {
  using asio::local::stream_protocol;
  check_socket_path(socket_path);
  asio::io_context io;
  stream_protocol::socket socket(io);
  asio::error_code ec;
  socket.connect(stream_protocol::endpoint(socket_path), ec);
  if (ec) {
    throw Error(ErrorKind::control_error,
                "cannot reach a host on '" + socket_path + "': " + ec.message());
  }
  asio::write(socket, asio::buffer(request.dump() + "\n"), ec);
  asio::streambuf buffer(kMaxRequestBytes);
  std::size_t n = 0;
  if (!ec) n = asio::read_until(socket, buffer, '\n', ec);
  if (ec) {
    throw Error(ErrorKind::control_error,
                "the host on '" + socket_path + "' did not answer: " + ec.message());
  }
  std::string line(asio::buffers_begin(buffer.data()),
                   asio::buffers_begin(buffer.data()) + static_cast<std::ptrdiff_t>(n));
  const auto reply = wire::parse_within_depth(line);
  if (reply.is_discarded() || !reply.is_object()) {
    throw Error(ErrorKind::control_error, "the host answered with something that is not JSON");
  }
  return reply;
}

}  // namespace isohost::control
