#pragma once

// Where a live-view listener binds (`serve --metrics ADDR --http ADDR`, isohost-web): ADDR is
// PORT or HOST:PORT, an IPv6 literal in brackets ([::1]:9100). The host defaults to 127.0.0.1,
// so a port alone never leaves the machine; port 0 asks the kernel for any free port.
//
//   auto a = parse_listen_address("9100");          // 127.0.0.1:9100, loopback
//   auto b = parse_listen_address("0.0.0.0:9100");  // every interface: not loopback, serve warns
//   parse_listen_address("9100x");                  // throws ListenAddressError
//
// Pure: nothing here resolves a name or touches a socket. A name other than "localhost" counts
// as not loopback, whatever it resolves to, so the warning errs on the side of saying it.

#include <stdexcept>
#include <string>
#include <string_view>

namespace isohost::control {

// What is wrong with an ADDR, with the text given: "'80x': the port must be a number from 0
// to 65535".
class ListenAddressError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ListenAddress {
  // As named (IPv6 without its brackets): an IPv4 or IPv6 literal, or a host name.
  std::string host = "127.0.0.1";
  // 0: any free port, which the listener reports once it has bound.
  int port = 0;

  // True for 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104 and "localhost": only this machine can
  // connect.
  [[nodiscard]] bool loopback() const;
  // HOST:PORT as parse_listen_address reads it back ([::1]:9100 for IPv6).
  [[nodiscard]] std::string to_string() const;
};

// Throws ListenAddressError for an empty text, a port outside 0..65535 or not all digits, an
// empty host, unbalanced brackets, or a host that is neither an IP literal nor a DNS name.
ListenAddress parse_listen_address(std::string_view text);

// http://HOST:PORT + path, with an IPv6 host in brackets. `path` starts with '/'.
std::string http_url(const std::string& host, int port, std::string_view path);

}  // namespace isohost::control
