#pragma once

// The machine's RAM as a whole, for the host RAM ledger.

#include <cstdint>
#include <string_view>

namespace isohost::probe {

// Bytes. Inside a container this is the host's view unless /proc/meminfo is virtualised
// (lxcfs): a cgroup memory limit does not show here.
struct SystemMemory {
  uint64_t total = 0;      // MemTotal
  uint64_t available = 0;  // MemAvailable: what can be allocated without swapping

  bool operator==(const SystemMemory&) const = default;
};

// Pure. Missing fields read 0. On kernels before 3.14 (no MemAvailable) available is
// estimated as MemFree + Buffers + Cached, which overstates it (not all cache is reclaimable).
SystemMemory parse_meminfo(std::string_view text);

// Reads /proc/meminfo. Throws ProbeError (unreadable) when it cannot.
SystemMemory read_system_memory();

}  // namespace isohost::probe
