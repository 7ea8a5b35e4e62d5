#pragma once

// The pool's status as `isohost ps --json`, the control op `ps` and Host.status() give it
// (docs/protocol.md, "ps"): one object per worker and zygote, the host, the devices' books, the
// machine's RAM and the planner's transfer rates. Unknown figures are null, never a guessed 0.

#include <nlohmann/json.hpp>

#include "pool/pool_status.hpp"

namespace isohost::control {

nlohmann::ordered_json status_json(const pool::PoolStatus& status);

}  // namespace isohost::control
