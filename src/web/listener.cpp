#include "web/listener.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace isohost::web {
namespace {

void reuse_address_only(socket_t fd) {
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// httplib says only that binding failed; this repeats what it does (getaddrinfo, socket,
// bind, listen) to say why.
std::string bind_failure(const control::ListenAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const auto service = std::to_string(address.port);
  if (const int rc = ::getaddrinfo(address.host.c_str(), service.c_str(), &hints, &found)) {
    return ::gai_strerror(rc);
  }
  std::string reason = "no address to bind";
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    reuse_address_only(fd);
    const bool ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1) == 0;
    if (!ok) reason = std::strerror(errno);
    ::close(fd);
    if (ok) {
      reason = "httplib could not bind it, though a plain socket can";
      break;
    }
  }
  ::freeaddrinfo(found);
  return reason;
}

}  // namespace

int bind_server(httplib::Server& server, const control::ListenAddress& address) {
  server.set_socket_options(reuse_address_only);
  int port = address.port;
  if (port == 0) {
    port = server.bind_to_any_port(address.host);
    if (port < 0) port = 0;
  } else if (!server.bind_to_port(address.host, port)) {
    port = 0;
  }
  if (port == 0) {
    throw ListenError("cannot listen on " + address.to_string() + ": " + bind_failure(address));
  }
  return port;
}

}  // namespace isohost::web
