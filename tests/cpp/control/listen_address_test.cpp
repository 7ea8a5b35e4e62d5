#include "control/listen_address.hpp"

#include <gtest/gtest.h>

namespace isohost::control {
namespace {

TEST(ListenAddress, APortAloneIsLoopback) {
  const auto a = parse_listen_address("9100");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9100);
  EXPECT_TRUE(a.loopback());
  EXPECT_EQ(a.to_string(), "127.0.0.1:9100");
}

TEST(ListenAddress, PortZeroAsksForAnyFreePort) {
  EXPECT_EQ(parse_listen_address("0").port, 0);
  EXPECT_EQ(parse_listen_address("127.0.0.1:0").port, 0);
}

TEST(ListenAddress, HostAndPort) {
  const auto a = parse_listen_address("192.168.1.20:8080");
  EXPECT_EQ(a.host, "192.168.1.20");
  EXPECT_EQ(a.port, 8080);
  EXPECT_FALSE(a.loopback());
}

TEST(ListenAddress, LoopbackIsTheWholeOf127AndIpv6LoopbackAndLocalhost) {
  for (const char* text : {"127.0.0.1:1", "127.1.2.3:1", "localhost:1", "LocalHost:1", "[::1]:1",
                           "[::ffff:127.0.0.1]:1"}) {
    EXPECT_TRUE(parse_listen_address(text).loopback()) << text;
  }
  for (const char* text : {"0.0.0.0:1", "[::]:1", "10.0.0.1:1", "128.0.0.1:1", "example.org:1",
                           "localhost.example.org:1", "[::ffff:10.0.0.1]:1", "[::2]:1"}) {
    EXPECT_FALSE(parse_listen_address(text).loopback()) << text;
  }
}

TEST(ListenAddress, Ipv6InBrackets) {
  const auto a = parse_listen_address("[::1]:9100");
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, 9100);
  EXPECT_EQ(a.to_string(), "[::1]:9100");
  EXPECT_EQ(parse_listen_address(a.to_string()).host, "::1");
}

TEST(ListenAddress, NamesAreKeptAsGiven) {
  const auto a = parse_listen_address("gpu-box.lan:9100");
  EXPECT_EQ(a.host, "gpu-box.lan");
  EXPECT_EQ(a.port, 9100);
}

TEST(ListenAddress, RefusesWhatIsNotAnAddress) {
  for (const char* text : {"",
                           "x",
                           "9100x",
                           "-1",
                           "65536",
                           "123456",
                           ":9100",
                           "127.0.0.1:",
                           "127.0.0.1:abc",
                           "::1:9100",
                           "[::1]",
                           "[::1]9100",
                           "[::1:9100",
                           "[nothost]:1",
                           "bad_name:1",
                           "a..b:1",
                           "-a:1",
                           "a b:1",
                           "127.0.0.1:+80",
                           "127.0.0.1: 80"}) {
    EXPECT_THROW(parse_listen_address(text), ListenAddressError) << "'" << text << "'";
  }
}

TEST(ListenAddress, TheErrorNamesTheText) {
  try {
    parse_listen_address("80x");
    FAIL() << "no error";
  } catch (const ListenAddressError& e) {
    EXPECT_STREQ(e.what(), "'80x': the port must be a number from 0 to 65535");
  }
}

TEST(ListenAddress, HttpUrlBracketsIpv6) {
  EXPECT_EQ(http_url("127.0.0.1", 41234, "/metrics"), "http://127.0.0.1:41234/metrics");
  EXPECT_EQ(http_url("::1", 8080, "/"), "http://[::1]:8080/");
}

}  // namespace
}  // namespace isohost::control
