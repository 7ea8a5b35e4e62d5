#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "pool/pool.hpp"

namespace isohost::control {

// {"ok": false, "error": {"kind": ..., "message": ..., "detail": ...}}
nlohmann::ordered_json failure(const isohost::Error& error);

// Parses one request line and carries it out on the pool (loop thread). `reply` runs once,
// with the answer; a malformed line is answered with BadRequest, never thrown.
void handle_request(pool::Pool& pool, const std::string& line,
                    const std::function<void(const nlohmann::ordered_json&)>& reply);

}  // namespace isohost::control
