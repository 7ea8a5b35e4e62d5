#pragma once

// What one environment is doing, as the pool sees it (docs/lifecycle.md, "An environment's
// states"). One value per environment, in place of the flags its slot once kept beside the
// worker's state. Where a worker is up, its own WorkerState (worker.hpp: the process's side of
// the protocol, starting ... asleep) says what it does.
//
//   empty -----------------> running <------------------> admitting_wake
//     |  spawn                 ^  a resting worker's wake    the wake's admission answered
//     |                        |  waits for room on the card (granted: woken; refused: rests)
//     +--> awaiting_zygote ----+  the zygote came up: fork
//     |         |              |
//     +---------+--> forking --+  the zygote's answer (adopted, or spawned fresh if it failed)
//
//   running, admitting_wake --(the worker retired or ended)--> empty

#include <cstdint>

namespace isohost::pool {

enum class EnvState : std::uint8_t {
  empty,            // no worker and none on the way: the next request starts one
  awaiting_zygote,  // a worker is needed and the zygote is still starting; its change pumps
  forking,          // the zygote was asked for the next worker; its answer brings it
  running,          // a worker is up (its WorkerState: starting, ready, busy, asleep, ...)
  admitting_wake,   // the worker rests (hibernated or asleep); its wake waits for admission
};

// How far one idle spell (from a worker's last call to its next) has gone. Each idle step is
// taken at most once a spell, deepest last, and none shallower after a deeper one: a worker
// woken without a call (`isohost wake`) is not released, put to sleep or hibernated again
// before it serves a call.
enum class IdleStep : std::uint8_t {
  none,        // nothing done since the last call
  released,    // its caches dropped
  slept,       // its models moved into its host RAM (or the sleep was tried)
  hibernated,  // its GPU state moved by the driver (or the hibernation was tried)
};

}  // namespace isohost::pool
