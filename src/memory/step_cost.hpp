#pragma once
// What one step that makes room costs, in seconds: what carrying it out takes now, and what
// the worker's next call pays because of it. Each is kept as terms (bytes at a rate, or a
// fixed time) so a plan can show its arithmetic, not only its sum.
//
//   sleep      now: held x sleep_out            undo (its wake): held x sleep_in
//   hibernate  now: held x sleep_out + fixed x driver_out
//              undo: fixed x driver_in + held x sleep_in
//              (a worker that cannot sleep: all of it at the driver's rates both ways)
//   reap       now: 0                           undo: start + held x reload
//   release    0 both ways: the allocator's cache comes back as the next call allocates
//
// An asleep worker's next call pays its wake from sleep whatever is done to it, so its prices
// leave that out: hibernating it costs what the driver moves, and reaping it credits the wake
// it no longer owes against rebuilding the model it had moved out.
//
//   StepCost cost = price_step(StepKind::sleep, holding, ledger.rates);
//   cost.seconds();  // seconds_now() + seconds_to_undo(): what the planner minimises

#include <string_view>
#include <vector>

#include "memory/ledger.hpp"
#include "memory/snapshot.hpp"
#include "memory/units.hpp"

namespace isohost::memory {

// What the planner may do to an idle worker, weakest first: each later kind gives back more
// and costs more to undo. A sleep, hibernation or reap includes the worker's release.
enum class StepKind {
  release,    // ask the worker to drop caches; gives back `cache`
  sleep,      // it moves its allocations into its host RAM; gives back `held + cache`
  hibernate,  // sleep (where it can), then the driver moves the rest; gives back `fixed + held`
  reap,       // end it; gives back all it holds
};

std::string_view to_string(StepKind kind) noexcept;

// Where a term of a price comes from.
enum class CostSource {
  sleep_out,       // TransferRates::sleep_out
  sleep_in,        // TransferRates::sleep_in
  driver_out,      // TransferRates::driver_out
  driver_in,       // TransferRates::driver_in
  reload,          // TransferRates::reload
  start_measured,  // its environment's mean start (VramHolding::start_time)
  start_assumed,   // TransferRates::start: its environment has no start measured yet
  wake_owed,       // a credit: the wake from sleep an asleep worker's next call pays anyway
};

// "sleep out", "start (assumed)", "wake it owes anyway": how explain() names a term.
std::string_view to_string(CostSource source) noexcept;

// One term: `bytes` at `seconds_per_gib`, or a fixed time (bytes and rate 0).
struct CostTerm {
  CostSource source = CostSource::sleep_out;
  Bytes bytes = 0;
  double seconds_per_gib = 0;
  double seconds = 0;  // negative for a credit

  constexpr bool per_gib() const noexcept { return seconds_per_gib > 0 || bytes > 0; }
};

struct StepCost {
  std::vector<CostTerm> now{};
  std::vector<CostTerm> undo{};

  double seconds_now() const noexcept;
  // Never below 0: a credit can cancel a cost, not pay the worker for its step.
  double seconds_to_undo() const noexcept;
  double seconds() const noexcept { return seconds_now() + seconds_to_undo(); }
};

// The price of `kind` on `holding` at `rates`. Pure; the caller decides whether the step is
// possible at all (a sleep needs holding.sleeps_now(), a hibernation the driver's support).
StepCost price_step(StepKind kind, const VramHolding& holding, const TransferRates& rates);

}  // namespace isohost::memory
