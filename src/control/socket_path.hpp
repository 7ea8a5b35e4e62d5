#pragma once

// The path of a control socket, checked before anything binds or connects to it: asio's
// endpoint would otherwise bind an empty path to an autobound abstract address that no client
// can name, and refuse a long one with a bare "File name too long" that does not say which.

#include <cstddef>
#include <string>

namespace isohost::control {

// The longest path sockaddr_un's sun_path holds, its NUL aside.
inline constexpr std::size_t kMaxSocketPathBytes = 107;

// Throws isohost::Error(control_error) naming the path and the reason when `path` is empty or
// longer than kMaxSocketPathBytes; touches nothing on disk.
void check_socket_path(const std::string& path);

}  // namespace isohost::control
