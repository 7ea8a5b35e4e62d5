#pragma once
// The grants promised and not yet seen in use, so no byte is promised twice.
//
// Admissions are decided one at a time on the host's loop. Between a grant and the moment the
// worker's allocation shows in NVML's free figure, the promised bytes are still "free" to
// NVML; the book remembers them so the next plan subtracts them (see admit() in
// admission.hpp, which plans against the book and books the grant in one step).
//
//   GrantBook book;
//   GrantId id = book.add("sdxl", 0, mib(4096), now);   // promised
//   ...                                                 // the worker allocates
//   book.settle(id);                                    // now NVML shows it: stop counting
//   for (const PendingGrant& g : book.expire(now, settings.grant_lifetime)) log(g);
//
// Not thread-safe: owned by the host's loop, like all pool state.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/snapshot.hpp"
#include "memory/units.hpp"

namespace isohost::memory {

class GrantBook {
 public:
  // Records `bytes` promised to `requester` on `device` at `now`; returns its id.
  GrantId add(std::string requester, int device, Bytes bytes, TimePoint now);

  // The grant was used (its bytes now show in NVML) or given up. False when the book does
  // not hold it (already settled or expired), which is harmless.
  bool settle(GrantId id);

  // Returns every grant older than `lifetime` at `now` to the free pool and hands them back
  // for the log ("grant 7 of 4096 MiB to 'sdxl' expired unused").
  std::vector<PendingGrant> expire(TimePoint now, Duration lifetime);

  // Drops every grant of a worker that ended (reaped, crashed); returns how many.
  std::size_t drop_worker(std::string_view requester);

  // Sum of pending bytes on one device.
  Bytes pending_on(int device) const noexcept;

  // The grants not yet settled, oldest first; valid until the next change to the book.
  std::span<const PendingGrant> outstanding() const noexcept { return grants_; }

 private:
  std::vector<PendingGrant> grants_{};
  GrantId next_id_ = 1;
};

}  // namespace isohost::memory
