#include "web/host_client.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "control/control_client.hpp"
#include "error/error.hpp"

namespace isohost::web {

// A host that has ended leaves no socket file (clean shutdown) or one that refuses connections
// (killed).
bool host_gone(const std::string& socket_path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) return false;
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  ::close(fd);
  return rc != 0 && (error == ENOENT || error == ECONNREFUSED);
}

nlohmann::ordered_json fetch_metrics(const std::string& socket_path) {
  nlohmann::ordered_json answer;
  try {
    answer = control::send_control_request(socket_path, {{"op", "metrics"}});
  } catch (const isohost::Error& e) {
    throw HostUnavailable(e.what(), host_gone(socket_path));
  }
  const auto ok = answer.find("ok");
  if (ok == answer.end() || *ok != true) {
    const auto error = answer.find("error");
    const bool named = error != answer.end() && error->is_object() && error->contains("message") &&
                       (*error)["message"].is_string();
    throw HostUnavailable("the host refused the metrics request: " +
                              (named ? (*error)["message"].get<std::string>() : answer.dump()),
                          false);
  }
  auto value = answer.value("value", nlohmann::ordered_json());
  if (!value.is_object() || !value.contains("status") || !value["status"].is_object()) {
    throw HostUnavailable("the host's metrics answer has no status object", false);
  }
  return value;
}

}  // namespace isohost::web
