#pragma once

// An httplib server bound to a ListenAddress, with the reason in words when it cannot be.

#include <httplib.h>

#include <stdexcept>
#include <string>

#include "control/listen_address.hpp"

namespace isohost::web {

// "cannot listen on 127.0.0.1:9100: Address already in use".
class ListenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Binds and listens (connections queue from here on; serving starts with listen_after_bind).
// Returns the port bound, the kernel's choice when `address.port` is 0. The socket has
// SO_REUSEADDR only, never SO_REUSEPORT (httplib's default on Linux), so a port another
// process listens on is refused rather than shared. Throws ListenError.
int bind_server(httplib::Server& server, const control::ListenAddress& address);

}  // namespace isohost::web
