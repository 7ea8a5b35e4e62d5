#pragma once

// The `hello` frame (docs/protocol.md): what a worker or zygote says of itself before anything
// else, checked field by field, so that a peer speaking a broken or foreign protocol is named at
// once (a ProtocolError within one read) instead of leaving its first caller to time out.

#include <nlohmann/json.hpp>

namespace isohost::worker {

// Throws wire::WireError naming the first field that is missing, of the wrong JSON type, or
// wrong: `op` "hello", `protocol` this host's version (an integer), `pid` a positive integer
// (not compared with the pid the host started: an interpreter given as a wrapper script may run
// Python as its child). The fields a host only reports (`env`, `python`, `executable`, `torch`,
// `capabilities`, a zygote's `zygote`, `preload` and `refusal`) must have their documented types
// where present, since ps and the zygote read them.
void check_hello(const nlohmann::ordered_json& body);

}  // namespace isohost::worker
