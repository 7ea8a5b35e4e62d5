#pragma once

// One line from a control client, checked before anything acts on it: pure, so the fuzzer
// (tests/fuzz) drives it without a pool.
//
//   const auto line = parse_request_line(R"({"op": "call", "env": "a", "target": "m:f"})");
//   line.op == "call"; line.args == []

#include <string>

#include <nlohmann/json.hpp>

namespace isohost::control {

struct RequestLine {
  std::string op;
  // For call, release, reap, hibernate, sleep and wake; empty for ps, metrics and shutdown.
  std::string env;
  // For call only.
  std::string target;
  nlohmann::ordered_json args = nlohmann::ordered_json::array();
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// The ops a client may send, in the order the unknown-op error lists them.
inline constexpr const char* kRequestOps[] = {"call",      "ps",    "metrics", "release", "reap",
                                              "hibernate", "sleep", "wake",    "shutdown"};

// Throws isohost::Error(bad_request) naming what is wrong: not one JSON object, nested deeper
// than wire::kMaxJsonDepth, an unknown op, a missing or non-string `op`, `env` or `target`,
// `args` not an array, `kwargs` not an object.
RequestLine parse_request_line(const std::string& line);

}  // namespace isohost::control
