// The search under the admission planner, on hand-made ways: the exhaustive search finds the
// cheapest cover, the greedy pass a cover, both within host RAM, at most one way per worker.

#include "memory/room_search.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace isohost::memory {
namespace {

RoomOption way(StepKind kind, Bytes gives_mib, double seconds, Bytes ram_in_mib = 0) {
  return {.kind = kind, .gives = mib(gives_mib), .ram_in = mib(ram_in_mib), .seconds = seconds};
}

RamLedger plenty_of_ram() { return {.mem_total = mib(65536), .available = mib(32768)}; }

using Picks = std::vector<std::optional<std::size_t>>;

TEST(RoomSearch, ExhaustiveFindsTheCheapestCoverWhereGreedyDoesNot) {
  // Short by 100: a and b give 60 each at the least seconds per byte; c alone gives 100 for
  // less than a and b together.
  const std::vector<RoomCandidate> candidates = {{.options = {way(StepKind::reap, 60, 0.6)}},
                                                 {.options = {way(StepKind::reap, 60, 0.6)}},
                                                 {.options = {way(StepKind::reap, 100, 1.1)}}};
  const RoomChoice best = exhaustive_choice(candidates, mib(100), plenty_of_ram());
  ASSERT_TRUE(best.covers);
  EXPECT_EQ(best.picked, (Picks{std::nullopt, std::nullopt, 0}));
  EXPECT_DOUBLE_EQ(best.seconds, 1.1);

  const RoomChoice greedy = greedy_choice(candidates, mib(100), plenty_of_ram());
  ASSERT_TRUE(greedy.covers);
  EXPECT_EQ(greedy.picked, (Picks{0, 0, std::nullopt}));
  EXPECT_DOUBLE_EQ(greedy.seconds, 1.2);
}

TEST(RoomSearch, OneWayPerWorkerAndTheRamRoomForAllTogether) {
  // Each sleep fits host RAM alone (6000 of 8000), not both: one sleeps, the other is reaped.
  const std::vector<RoomCandidate> candidates = {
      {.options = {way(StepKind::sleep, 6000, 0.6, 6000), way(StepKind::reap, 6600, 8.0)}},
      {.options = {way(StepKind::sleep, 6000, 0.6, 6000), way(StepKind::reap, 6600, 8.0)}}};
  const RamLedger ram{.mem_total = mib(65536), .available = mib(8000)};
  for (const RoomChoice& choice : {exhaustive_choice(candidates, mib(11000), ram),
                                   greedy_choice(candidates, mib(11000), ram)}) {
    ASSERT_TRUE(choice.covers);
    EXPECT_EQ(choice.picked, (Picks{0, 1}));  // the earlier worker gets the weaker way
    EXPECT_EQ(choice.ram_in, mib(6000));
    EXPECT_EQ(choice.steps, 2u);
  }
}

TEST(RoomSearch, FreeStepsAreNotTakenBeyondNeed) {
  // Releases cost nothing; the fewest that cover win, not all of them.
  const std::vector<RoomCandidate> candidates = {{.options = {way(StepKind::release, 1000, 0)}},
                                                 {.options = {way(StepKind::release, 800, 0)}},
                                                 {.options = {way(StepKind::release, 200, 0)}}};
  const RoomChoice best = exhaustive_choice(candidates, mib(1712), plenty_of_ram());
  EXPECT_EQ(best.picked, (Picks{0, 0, std::nullopt}));
  const RoomChoice greedy = greedy_choice(candidates, mib(1712), plenty_of_ram());
  EXPECT_EQ(greedy.gives, mib(1800));
}

TEST(RoomSearch, NoCoverWhenEverythingIsShort) {
  const std::vector<RoomCandidate> candidates = {{.options = {way(StepKind::reap, 100, 5)}}};
  EXPECT_FALSE(exhaustive_choice(candidates, mib(200), plenty_of_ram()).covers);
  EXPECT_FALSE(greedy_choice(candidates, mib(200), plenty_of_ram()).covers);
}

// Many workers, many shortfalls: the greedy pass always covers when a cover exists, never
// beats the exhaustive price, and cheapest_choice switches at the limit.
TEST(RoomSearch, GreedyCoversWhereExhaustiveDoesAndNeverBeatsIt) {
  std::vector<RoomCandidate> candidates;
  Bytes everything = 0;
  for (int i = 0; i < static_cast<int>(kExhaustiveCandidates) + 2; ++i) {
    const Bytes held = 700 + 131 * static_cast<Bytes>(i);
    const Bytes cache = 50 * static_cast<Bytes>(i % 4);
    const double held_gib = static_cast<double>(held) / 1024;
    candidates.push_back(
        {.options = {
             way(StepKind::release, cache, 0),
             way(StepKind::sleep, held + cache, 0.1 * held_gib, held),
             way(StepKind::hibernate, held + cache + 612, 0.1 * held_gib + 0.37, held + 612),
             way(StepKind::reap, held + cache + 612, 5 + 0.5 * held_gib)}});
    if (cache == 0) candidates.back().options.erase(candidates.back().options.begin());
    everything += held + cache + 612;
  }
  const RamLedger ram{.mem_total = mib(65536), .available = mib(9000)};
  for (const Bytes short_mib : {Bytes{500}, Bytes{4000}, everything / 2, everything}) {
    const RoomChoice best = exhaustive_choice(candidates, mib(short_mib), ram);
    const RoomChoice greedy = greedy_choice(candidates, mib(short_mib), ram);
    ASSERT_TRUE(best.covers) << short_mib;
    ASSERT_TRUE(greedy.covers) << short_mib;
    EXPECT_GE(greedy.gives, mib(short_mib));
    EXPECT_LE(greedy.ram_in, mib(9000));
    EXPECT_GE(greedy.seconds, best.seconds - 1e-9) << short_mib;
    EXPECT_EQ(cheapest_choice(candidates, mib(short_mib), ram).picked, greedy.picked);
    const std::span<const RoomCandidate> few(candidates.data(), kExhaustiveCandidates);
    EXPECT_EQ(cheapest_choice(few, mib(500), ram).picked,
              exhaustive_choice(few, mib(500), ram).picked);
  }
}

}  // namespace
}  // namespace isohost::memory
