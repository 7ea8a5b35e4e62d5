#include "pool/caller_polling.hpp"

#include <sched.h>

namespace isohost::pool {

std::chrono::microseconds caller_poll_window() {
  // The caller, the loop and the worker each poll; one more core is left for everything else.
  constexpr int kCoresNeeded = 4;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof cpus, &cpus) != 0) return std::chrono::microseconds(0);
  return CPU_COUNT(&cpus) >= kCoresNeeded ? std::chrono::microseconds(100)
                                          : std::chrono::microseconds(0);
}

}  // namespace isohost::pool
