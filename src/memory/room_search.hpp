#pragma once
// The search behind admission: given idle workers and the ways each may give back VRAM (each
// priced, each taking some host RAM in), choose at most one way per worker so that together
// they give back at least the shortfall, host RAM can take in what they move, and the total
// price is least.
//
// Up to kExhaustiveCandidates workers every combination is weighed (pruned by price, by what
// is still reachable, and by host RAM); beyond, a greedy pass takes, while short, the way that
// adds the fewest seconds per byte of the shortfall it covers (a stronger way may replace a
// weaker one on the same worker), then drops the ways the rest make unneeded. Both are
// deterministic: among choices of equal price, fewer steps win, then the choice that acts on
// workers earlier in the given order (the caller orders them least recently used first), then
// the weaker way on the same worker.
//
//   std::vector<RoomCandidate> candidates = ...;  // least recently used first
//   RoomChoice choice = cheapest_choice(candidates, short_by, ledger.ram);
//   if (choice.covers) for (i, pick) in choice.picked: candidates[i].options[*pick] ...
//
// Cost: exhaustive, at most (options + 1)^n combinations before pruning (n <= 10: under a
// millisecond for ten workers of four ways each); greedy, O(m^2) in the m ways of all workers.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "memory/ledger.hpp"
#include "memory/step_cost.hpp"
#include "memory/units.hpp"

namespace isohost::memory {

// One way to make room on one worker.
struct RoomOption {
  StepKind kind = StepKind::release;
  Bytes gives = 0;     // VRAM it gives back
  Bytes ram_in = 0;    // host RAM it takes in (sleeps and hibernations)
  double seconds = 0;  // its price: seconds now + seconds to undo
};

// One idle worker and the ways open to it, weakest first; the search picks one or none.
struct RoomCandidate {
  std::vector<RoomOption> options{};

  Bytes most_it_gives() const noexcept;
};

struct RoomChoice {
  // Per candidate, the index of the option chosen, or nullopt when it is left alone.
  std::vector<std::optional<std::size_t>> picked{};
  Bytes gives = 0;
  Bytes ram_in = 0;
  double seconds = 0;
  std::size_t steps = 0;
  bool covers = false;  // gives >= the shortfall, within host RAM's room
};

// Up to this many candidates the search weighs every combination.
inline constexpr std::size_t kExhaustiveCandidates = 10;

// Exhaustive up to kExhaustiveCandidates candidates, greedy beyond.
RoomChoice cheapest_choice(std::span<const RoomCandidate> candidates, Bytes short_by,
                           const RamLedger& ram);
// The two searches themselves, for tests and benches that compare them.
RoomChoice exhaustive_choice(std::span<const RoomCandidate> candidates, Bytes short_by,
                             const RamLedger& ram);
RoomChoice greedy_choice(std::span<const RoomCandidate> candidates, Bytes short_by,
                         const RamLedger& ram);

}  // namespace isohost::memory
