#include "memory/grant_book.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace isohost::memory {

GrantId GrantBook::add(std::string requester, int device, Bytes bytes, TimePoint now) {
  const GrantId id = next_id_++;
  grants_.push_back({.id = id,
                     .requester = std::move(requester),
                     .device = device,
                     .bytes = bytes,
                     .granted_at = now});
  return id;
}

bool GrantBook::settle(GrantId id) {
  const auto found = std::find_if(grants_.begin(), grants_.end(),
                                  [id](const PendingGrant& g) { return g.id == id; });
  if (found == grants_.end()) return false;
  grants_.erase(found);
  return true;
}

std::vector<PendingGrant> GrantBook::expire(TimePoint now, Duration lifetime) {
  const auto still_pending = [now, lifetime](const PendingGrant& g) {
    return now - g.granted_at < lifetime;
  };
  const auto first_expired = std::stable_partition(grants_.begin(), grants_.end(), still_pending);
  std::vector<PendingGrant> returned(std::make_move_iterator(first_expired),
                                     std::make_move_iterator(grants_.end()));
  grants_.erase(first_expired, grants_.end());
  return returned;
}

std::size_t GrantBook::drop_worker(std::string_view requester) {
  return std::erase_if(grants_,
                       [requester](const PendingGrant& g) { return g.requester == requester; });
}

Bytes GrantBook::pending_on(int device) const noexcept {
  Bytes sum = 0;
  for (const PendingGrant& grant : grants_) {
    if (grant.device == device) sum += grant.bytes;
  }
  return sum;
}

}  // namespace isohost::memory
