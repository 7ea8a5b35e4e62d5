#pragma once

#include <string>

namespace isohost::worker {

// The directory holding the isohost_worker package: $ISOHOST_RUNTIME_DIR if set, else
// `python/` beside the running program (the build copies it there), else the source tree's
// `python/` the program was built from. Throws Error(spawn_failed) when none has it.
std::string find_worker_runtime();

}  // namespace isohost::worker
