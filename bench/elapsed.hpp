#pragma once

#include <chrono>

namespace isohost::bench {

using Clock = std::chrono::steady_clock;

// Time since `start` in the unit a figure is reported in: elapsed<std::micro>(start).
template <class Unit>
double elapsed(Clock::time_point start) {
  return std::chrono::duration<double, Unit>(Clock::now() - start).count();
}

}  // namespace isohost::bench
