#include "pool/transfer_rate.hpp"

namespace isohost::pool {

void fold_transfer(double& seconds_per_gib, std::uint64_t bytes, double seconds) {
  constexpr std::uint64_t kSmallest = std::uint64_t{64} << 20;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (bytes < kSmallest || !(seconds > 0)) return;
  seconds_per_gib = 0.75 * seconds_per_gib + 0.25 * (seconds / (static_cast<double>(bytes) / kGiB));
}

}  // namespace isohost::pool
