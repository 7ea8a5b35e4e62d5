#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace isohost::control {

// Sends one request to a running host and returns its answer ({"ok": ...}). Blocking; for the
// CLI and tests. Throws isohost::Error(control_error) when the host cannot be reached or
// answers with something that is not a JSON line, and for an empty or too long path
// (check_socket_path) before connecting.
nlohmann::ordered_json send_control_request(const std::string& socket_path,
                                            const nlohmann::ordered_json& request);

}  // namespace isohost::control
