#pragma once

#include <string>

namespace isohost::cli {

// The interpreter `isohost footprint` and the benchmarks use by default: the first of
// `python3` on PATH and /usr/bin/python3 that can import torch (found without importing it),
// else `python3`.
std::string default_python();

}  // namespace isohost::cli
