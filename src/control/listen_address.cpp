#include "control/listen_address.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>

namespace isohost::control {
namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

int parse_port(std::string_view whole, std::string_view port) {
  const auto bad = [&] {
    return ListenAddressError(quoted(whole) + ": the port must be a number from 0 to 65535");
  };
  if (port.empty() || port.size() > 5) throw bad();
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') throw bad();
    value = value * 10 + (c - '0');
  }
  if (value > 65535) throw bad();
  return value;
}

bool is_ipv4(const std::string& host) {
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1;
}

bool is_ipv6(const std::string& host) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

// RFC 1123 names: dot-separated labels of letters, digits and hyphens, none empty, none
// starting or ending with a hyphen, at most 63 characters each and 253 in all.
bool is_dns_name(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  std::size_t start = 0;
  while (start <= host.size()) {
    const auto dot = host.find('.', start);
    const auto label = host.substr(start, dot == std::string_view::npos ? host.npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    const bool allowed = std::all_of(label.begin(), label.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-';
    });
    if (!allowed) return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

bool ListenAddress::loopback() const {
  if (iequals(host, "localhost")) return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

std::string ListenAddress::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

ListenAddress parse_listen_address(std::string_view text) {
  if (text.empty()) throw ListenAddressError("an empty address: give PORT or HOST:PORT");
  ListenAddress out;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw ListenAddressError(quoted(text) + ": write an IPv6 address as [ADDRESS]:PORT");
    }
    out.host = std::string(text.substr(1, close - 1));
    if (!is_ipv6(out.host)) {
      throw ListenAddressError(quoted(text) + ": " + quoted(out.host) + " is not an IPv6 address");
    }
    out.port = parse_port(text, text.substr(close + 2));
    return out;
  }
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    out.port = parse_port(text, text);
    return out;
  }
  out.host = std::string(text.substr(0, colon));
  if (out.host.empty()) throw ListenAddressError(quoted(text) + ": the host before ':' is empty");
  if (out.host.find(':') != std::string::npos) {
    throw ListenAddressError(quoted(text) + ": write an IPv6 address as [ADDRESS]:PORT");
  }
  if (!is_ipv4(out.host) && !is_dns_name(out.host)) {
    throw ListenAddressError(quoted(text) + ": " + quoted(out.host) +
                             " is neither an IP address nor a host name");
  }
  out.port = parse_port(text, text.substr(colon + 1));
  return out;
}

std::string http_url(const std::string& host, int port, std::string_view path) {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) +
         std::string(path);
}

}  // namespace isohost::control
