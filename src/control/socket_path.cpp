#include "control/socket_path.hpp"

#include <sys/un.h>

#include "error/error.hpp"

namespace isohost::control {

static_assert(kMaxSocketPathBytes + 1 == sizeof(sockaddr_un::sun_path));

void check_socket_path(const std::string& path) {
  if (path.empty()) {
    throw Error(ErrorKind::control_error,
                "the socket path is empty; name a file, such as /run/user/$UID/isohost.sock");
  }
  if (path.size() > kMaxSocketPathBytes) {
    throw Error(ErrorKind::control_error, "socket path '" + path + "' is " +
                                              std::to_string(path.size()) +
                                              " bytes; a Unix socket path holds at most " +
                                              std::to_string(kMaxSocketPathBytes));
  }
}

}  // namespace isohost::control
