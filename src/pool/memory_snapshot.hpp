#pragma once

// The bridge from what the pool measured (PoolStatus with memory) to the memory arithmetic's
// input (memory::Snapshot), so admission, `isohost ps` and the pressure sweep read one set of
// books.

#include <span>

#include "memory/snapshot.hpp"
#include "pool/config.hpp"
#include "worker/worker.hpp"

namespace isohost::pool {

struct PoolStatus;

// A worker's lifecycle state as the memory arithmetic sees it.
memory::WorkerState memory_state(worker::WorkerState state);

memory::MemorySettings memory_settings(const HostSettings& host);

// Workers that are stopping are left out: they hold their memory until they are gone, and
// what they hold shows as used, neither free nor reclaimable.
memory::Snapshot make_snapshot(const PoolStatus& status, const HostSettings& host,
                               std::span<const memory::PendingGrant> pending, memory::TimePoint now);

}  // namespace isohost::pool
