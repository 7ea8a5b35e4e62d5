#include "control/socket_path.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "control/control_client.hpp"
#include "error/error.hpp"

namespace isohost::control {
namespace {

using ::testing::HasSubstr;

std::string refusal(const std::string& path) {
  try {
    check_socket_path(path);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::control_error);
    return e.what();
  }
  return "";
}

TEST(SocketPath, AnEmptyPathIsRefused) {
  EXPECT_THAT(refusal(""), HasSubstr("the socket path is empty"));
}

TEST(SocketPath, APathLongerThanSunPathIsRefusedByNameAndLength) {
  EXPECT_EQ(refusal("/" + std::string(106, 's')), "") << "107 bytes fit";
  const std::string path = "/tmp/" + std::string(116, 'x');
  EXPECT_EQ(refusal(path),
            "socket path '" + path + "' is 121 bytes; a Unix socket path holds at most 107");
}

TEST(SocketPath, TheClientChecksThePathBeforeConnecting) {
  for (const std::string& path : {std::string(), std::string(200, 'y')}) {
    try {
      send_control_request(path, {{"op", "ps"}});
      ADD_FAILURE() << "no error for '" << path << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::control_error);
      EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("empty"), HasSubstr("at most 107")));
    }
  }
}

}  // namespace
}  // namespace isohost::control
