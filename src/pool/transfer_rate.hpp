#pragma once

// Seconds per GiB that this machine took to move bytes one way (sleep out, sleep in, the
// driver's checkpoint and restore), kept for the admission planner's costs (memory::TransferRates).

#include <cstdint>

namespace isohost::pool {

// Folds one transfer of `bytes` in `seconds` into `seconds_per_gib`: the newest counts a
// quarter, so one odd transfer neither rules nor is ignored. Transfers under 64 MiB time fixed
// costs rather than the bus and are left out, as are non-positive times.
void fold_transfer(double& seconds_per_gib, std::uint64_t bytes, double seconds);

}  // namespace isohost::pool
