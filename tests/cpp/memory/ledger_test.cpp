// The books: how one worker's VRAM splits into fixed, held and reclaimable; how a device's
// grantable figure keeps the reserve, pending grants and foreign usage out; how hibernation
// moves a worker's bytes from the device ledger to the RAM ledger, and which part of it a
// sleep moves first.

#include "memory/ledger.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "memory_fixtures.hpp"

namespace isohost::memory {
namespace {

using testing::snapshot_of;
using testing::WorkerRow;

struct SplitCase {
  std::string name;
  std::optional<Bytes> used_mib, reserved_mib, allocated_mib;
  Bytes release_can_free_mib = 0;
  Bytes fixed_mib = 0, held_mib = 0, reclaimable_mib = 0;
  bool vram_known = true;
  bool allocator_known = true;
};

std::optional<Bytes> in_bytes(std::optional<Bytes> mib_value) {
  if (!mib_value) return std::nullopt;
  return mib(*mib_value);
}

class VramSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(VramSplit, SplitsUsedIntoFixedHeldReclaimable) {
  const SplitCase& row = GetParam();
  const ProcessFigures process{.worker_id = "w",
                               .vram_used = in_bytes(row.used_mib),
                               .allocator_reserved = in_bytes(row.reserved_mib),
                               .allocator_allocated = in_bytes(row.allocated_mib),
                               .release_can_free = mib(row.release_can_free_mib)};
  const VramHolding holding = vram_holding(process);
  EXPECT_EQ(holding.fixed, mib(row.fixed_mib));
  EXPECT_EQ(holding.held, mib(row.held_mib));
  EXPECT_EQ(holding.reclaimable, mib(row.reclaimable_mib));
  EXPECT_EQ(holding.vram_known, row.vram_known);
  EXPECT_EQ(holding.allocator_known, row.allocator_known);
  if (row.used_mib) {
    EXPECT_EQ(holding.used(), mib(*row.used_mib));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ledger, VramSplit,
    ::testing::Values(
        // A torch worker on the H200: 612 MiB context, 1 GiB tensor, 500 MiB cached.
        SplitCase{"context_held_cache", 2136, 1524, 1024, 0, 612, 1024, 500},
        SplitCase{"release_drops_model_caches_too", 2136, 1524, 1024, 400, 612, 624, 900},
        SplitCase{"release_cannot_drop_more_than_allocated", 2136, 1524, 1024, 5000, 612, 0, 1524},
        SplitCase{"context_only", 612, 0, 0, 0, 612, 0, 0},
        SplitCase{"reserved_above_used_is_clamped", 1000, 1500, 200, 0, 0, 200, 800},
        SplitCase{"allocated_above_reserved_is_clamped", 1000, 600, 900, 0, 400, 600, 0},
        SplitCase{"no_allocator_report_counts_all_fixed", 2000, std::nullopt, std::nullopt, 0, 2000,
                  0, 0, true, false},
        SplitCase{"no_allocated_figure_counts_no_cache", 2000, 1500, std::nullopt, 0, 500, 1500, 0},
        SplitCase{"unknown_vram_counts_the_allocator_as_a_lower_bound", std::nullopt, 1500, 1000, 0,
                  0, 1000, 500, false, true},
        SplitCase{"nothing_known_counts_nothing", std::nullopt, std::nullopt, std::nullopt, 0, 0, 0,
                  0, false, false}),
    [](const auto& info) { return info.param.name; });

TEST(DeviceLedger, GrantableIsFreeLessReserveLessPending) {
  Snapshot snapshot = snapshot_of({}, 5000);
  snapshot.pending = {{.id = 1, .device = 0, .bytes = mib(1000)},
                      {.id = 2, .device = 0, .bytes = mib(500)},
                      {.id = 3, .device = 1, .bytes = mib(700)}};
  const Ledger ledger = build_ledger(snapshot);
  const DeviceLedger* gpu = ledger.device(0);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->reserve, mib(512));
  EXPECT_EQ(gpu->pending, mib(1500));
  EXPECT_EQ(gpu->grantable(), mib(5000 - 512 - 1500));
  EXPECT_EQ(ledger.device(1), nullptr);
}

TEST(DeviceLedger, GrantableIsNeverNegative) {
  Snapshot snapshot = snapshot_of({}, 300);  // less free than the reserve
  EXPECT_EQ(build_ledger(snapshot).device(0)->grantable(), 0u);
  snapshot = snapshot_of({}, 1000);
  snapshot.pending = {{.id = 1, .device = 0, .bytes = mib(4000)}};
  EXPECT_EQ(build_ledger(snapshot).device(0)->grantable(), 0u);
}

TEST(DeviceLedger, ForeignUsageIsNeverFree) {
  // NVML says 10000 MiB free, but 20000 of the 24576 are held by processes not ours: the
  // free figure is stale, and the ledger believes the smaller.
  const Ledger ledger = build_ledger(snapshot_of({}, 10000, 20000));
  EXPECT_EQ(ledger.device(0)->free, mib(4576));
  EXPECT_EQ(ledger.device(0)->foreign, mib(20000));
}

TEST(DeviceLedger, SumsPerWorkerAndUnattributed) {
  // Two workers use 612+1000+200 and 612+0+0; foreign 1000; free 20000 of 24576.
  const Ledger ledger = build_ledger(snapshot_of(
      {{.id = "a", .held_mib = 1000, .cache_mib = 200}, {.id = "b"}, {.id = "c", .device = 1}},
      20000, 1000));
  const DeviceLedger& gpu = *ledger.device(0);
  ASSERT_EQ(gpu.holdings.size(), 2u);  // c is on another device
  EXPECT_EQ(gpu.workers_fixed(), mib(1224));
  EXPECT_EQ(gpu.workers_held(), mib(1000));
  EXPECT_EQ(gpu.workers_reclaimable(), mib(200));
  EXPECT_EQ(gpu.workers_used(), mib(2424));
  EXPECT_EQ(gpu.unattributed(), mib(24576 - 20000 - 1000 - 2424));
}

TEST(HibernatedWorker, CountsNoVramAndItsRamGrows) {
  Snapshot snapshot = snapshot_of(
      {{.id = "h", .state = WorkerState::hibernated, .held_mib = 4096, .pss_mib = 600}}, 20000);
  ProcessFigures& h = snapshot.processes.front();
  h.hibernated_bytes = mib(4708);
  snapshot.host_ram.mem_available = mib(30000);

  const Ledger ledger = build_ledger(snapshot);
  EXPECT_EQ(ledger.device(0)->holdings.front().used(), 0u);
  EXPECT_EQ(ledger.ram.holdings.front().held(), mib(600 + 4708));
  EXPECT_EQ(ledger.ram.workers_total(), mib(5308));
  EXPECT_EQ(ledger.ram.available, mib(30000 - 4708));
}

TEST(HibernatedWorker, NotCountedTwiceOnceReadingsShowIt) {
  Snapshot snapshot =
      snapshot_of({{.id = "h", .state = WorkerState::hibernated, .pss_mib = 5308}}, 20000);
  ProcessFigures& h = snapshot.processes.front();
  h.hibernated_bytes = mib(4708);
  h.pss_counts_hibernated = true;
  snapshot.host_ram.mem_available = mib(25292);

  const Ledger ledger = build_ledger(snapshot);
  EXPECT_EQ(ledger.ram.workers_total(), mib(5308));
  EXPECT_EQ(ledger.ram.available, mib(25292));
}

TEST(SleepingWorker, HoldingCarriesWhatThePlannerPricesWith) {
  Snapshot snapshot =
      snapshot_of({{.id = "a", .held_mib = 2000, .can_sleep = true, .start_s = 3.5}}, 20000);
  const Ledger ledger = build_ledger(snapshot);  // kept: the holding is a reference into it
  const VramHolding& a = ledger.device(0)->holdings.front();
  EXPECT_TRUE(a.can_sleep);
  EXPECT_TRUE(a.sleeps_now());
  ASSERT_TRUE(a.start_time.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(*a.start_time).count(), 3500);
  EXPECT_FALSE(vram_holding(snapshot_of({{.id = "b"}}, 20000).processes.front()).start_time);
}

TEST(SleepingWorker, HibernationMovesHeldBySleepAndFixedByTheDriver) {
  const Snapshot snapshot =
      snapshot_of({{.id = "s", .held_mib = 2000, .cache_mib = 100, .can_sleep = true},
                   {.id = "d", .held_mib = 2000, .cache_mib = 100}},
                  20000);
  const Ledger ledger = build_ledger(snapshot);
  const DeviceLedger& gpu = *ledger.device(0);
  const VramHolding& sleeps = gpu.holdings[0];
  EXPECT_EQ(sleeps.hibernation_moves(), mib(2612));  // released first: the cache is dropped
  EXPECT_EQ(sleeps.hibernation_by_sleep(), mib(2000));
  EXPECT_EQ(sleeps.hibernation_by_driver(), mib(612));
  const VramHolding& driver_only = gpu.holdings[1];
  EXPECT_EQ(driver_only.hibernation_by_sleep(), 0u);
  EXPECT_EQ(driver_only.hibernation_by_driver(), mib(2612));
}

TEST(SleepingWorker, AsleepHoldsItsContextOnTheCardAndItsModelsInRam) {
  // Its sleep moved 10240 MiB; the PSS reading already shows them.
  Snapshot snapshot = snapshot_of({{.id = "z",
                                    .state = WorkerState::asleep,
                                    .pss_mib = 10840,
                                    .can_sleep = true,
                                    .slept_mib = 10240}},
                                  20000);
  const Ledger ledger = build_ledger(snapshot);
  const VramHolding& z = ledger.device(0)->holdings.front();
  EXPECT_EQ(z.used(), mib(612));
  EXPECT_EQ(z.fixed, mib(612));
  EXPECT_EQ(z.slept_bytes, mib(10240));
  EXPECT_FALSE(z.sleeps_now());  // never slept again
  EXPECT_EQ(z.hibernation_by_sleep(), 0u);
  EXPECT_EQ(z.hibernation_by_driver(), mib(612));
  EXPECT_EQ(ledger.ram.workers_total(), mib(10840));  // not counted twice
  EXPECT_EQ(ledger.ram.available, mib(32768));
  EXPECT_EQ(to_string(WorkerState::asleep), "asleep");
}

TEST(SleepingWorker, RatesTravelFromTheSettingsToTheBooks) {
  Snapshot snapshot = snapshot_of({}, 20000);
  snapshot.settings.rates.sleep_out = 0.02;
  const Ledger ledger = build_ledger(snapshot);
  EXPECT_EQ(ledger.rates.sleep_out, 0.02);
  EXPECT_EQ(ledger.rates.driver_out, TransferRates{}.driver_out);
}

struct RoomCase {
  std::string name;
  Bytes available_mib, floor_mib, budget_mib, extra_mib;
  RamRoom room;
};

class RamRoomFor : public ::testing::TestWithParam<RoomCase> {};

TEST_P(RamRoomFor, ChecksAvailableFloorAndBudget) {
  const RoomCase& row = GetParam();
  RamLedger ram{.available = mib(row.available_mib),
                .budget = mib(row.budget_mib),
                .floor = mib(row.floor_mib),
                .holdings = {{.worker_id = "a", .pss = mib(1000)}}};
  EXPECT_EQ(ram.room_for(mib(row.extra_mib)), row.room);
}

INSTANTIATE_TEST_SUITE_P(
    Ledger, RamRoomFor,
    ::testing::Values(RoomCase{"enough", 8000, 1024, 0, 2000, RamRoom::enough},
                      RoomCase{"exactly_the_floor", 8000, 1024, 0, 6976, RamRoom::enough},
                      RoomCase{"below_floor", 8000, 1024, 0, 7000, RamRoom::below_floor},
                      RoomCase{"not_there", 8000, 0, 0, 8001, RamRoom::exceeds_available},
                      RoomCase{"within_budget", 8000, 0, 3000, 2000, RamRoom::enough},
                      RoomCase{"over_budget", 8000, 0, 3000, 2001, RamRoom::over_budget}),
    [](const auto& info) { return info.param.name; });

TEST(MemoryUnits, MibTextAndSecondsText) {
  EXPECT_EQ(mib_text(mib(688)), "688 MiB");
  EXPECT_EQ(mib_text(0), "0 MiB");
  EXPECT_EQ(mib_text(kMiB / 2), "0.5 MiB");
  EXPECT_EQ(seconds_text(std::chrono::seconds(30)), "30 s");
  EXPECT_EQ(seconds_text(std::chrono::milliseconds(2500)), "2.5 s");
  EXPECT_EQ(saturating_sub(1, 2), 0u);
}

TEST(MemoryUnits, PriceTextAndRateText) {
  EXPECT_EQ(price_text(0), "0 s");
  EXPECT_EQ(price_text(0.5), "0.50 s");
  EXPECT_EQ(price_text(5.4395), "5.44 s");
  EXPECT_EQ(rate_text(0.05), "0.05 s/GiB");
  EXPECT_EQ(rate_text(0.5), "0.50 s/GiB");
  EXPECT_EQ(rate_text(0.018), "0.018 s/GiB");
}

}  // namespace
}  // namespace isohost::memory
