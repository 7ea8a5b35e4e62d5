#pragma once

// The host's configuration: one TOML file, every setting defaulted.
//
//   [host]
//   call_timeout_seconds = 600
//   [env.vision]
//   python = "/opt/envs/vision/bin/python"
//   path = ["/opt/packs/vision"]
//   env = { CUDA_MODULE_LOADING = "LAZY" }
//
// Unknown keys are errors: a misspelt setting silently ignored is worse than a refusal. So are
// values out of range, each refused with the file, line, key and value:
//   *_seconds   finite, from 0 to a year (31536000), and 0 or at least a millisecond;
//   *_mb        a whole number from 0 to 10^12 (an exabyte);
//   *_mib       a whole number from 0 to 2^40 (an exbibyte);
//   strings     (python, path, cwd, env values, preload, simulated_gpu) and environment and
//               variable names without a NUL character; variable names non-empty, without '='.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace isohost::pool {

struct HostSettings {
  // A call running longer is killed with its worker (per environment, overridable).
  std::chrono::milliseconds call_timeout{600'000};
  // From spawn to hello.
  std::chrono::milliseconds start_timeout{60'000};
  // A worker idle this long is asked to release its caches (once per idle spell); zero: never.
  std::chrono::milliseconds idle_release{60'000};
  // A worker idle this long is ended; zero keeps idle workers forever.
  std::chrono::milliseconds idle_reap{1'800'000};
  // All workers' PSS together may not exceed this (bytes; 0 = no budget): idle workers are
  // reaped, largest first, until it holds.
  std::uint64_t ram_budget = 0;
  // MemAvailable is kept at or above this (bytes; 0 = no floor), by the same reaping.
  std::uint64_t ram_floor = 0;
  // Between the shutdown frame and the kill.
  std::chrono::milliseconds shutdown_grace{5'000};
  // Kept free on every card for the driver, cuBLAS workspaces and fragmentation (bytes).
  std::uint64_t vram_reserve = std::uint64_t{512} << 20;
  // How long a VRAM reservation may wait for busy workers to finish before it is refused.
  std::chrono::milliseconds admission_wait{30'000};
  // A granted reservation not seen in use (the call that asked still running) within this is
  // returned to the free pool.
  std::chrono::milliseconds grant_lifetime{60'000};
  // Tests only: a JSON file standing in for the GPU (probe/simulated_gpu.hpp); empty uses NVML.
  std::string simulated_gpu;
  // A worker idle this long is hibernated (its GPU state moved into its host RAM) where the
  // driver allows; zero: never on a timer (docs/hibernation.md says why that is the default).
  std::chrono::milliseconds idle_hibernate{0};
  // A worker idle this long sleeps (moves its models into its host RAM itself, at the bus's
  // speed; docs/sleep.md); zero: never on a timer. Its next call pays the wake.
  std::chrono::milliseconds idle_sleep{0};
  // After each op a worker polls its socket this long before it sleeps: waking a sleeping
  // process costs more than a small call itself. Zero: sleep at once (docs/protocol.md#polling).
  std::chrono::microseconds worker_poll{100};
  // After a call returns, the host's event loop polls this long before it sleeps, so that the
  // caller's next call finds it awake: a caller that does its own work between calls (ComfyUI
  // between two nodes) outlasts the loop's usual window, and waking the loop then costs a
  // thread wake-up on an idle CPU. Only after a call, not while one runs: a spinning loop would
  // take a core from the worker's own threads. Zero: the usual window alone
  // (docs/protocol.md#polling).
  std::chrono::microseconds loop_poll_after_call{0};
};

// The highest GPU index a configuration or a request may name; admission numbers devices as
// int, so a larger one would wrap (10^12 became GPU -727379968).
inline constexpr unsigned kMaxDevice = 255;

struct EnvironmentConfig {
  std::string name;
  std::string python = "python3";
  std::vector<std::string> path;
  std::string cwd;
  std::map<std::string, std::string> env;
  // Overrides [host] call_timeout_seconds for this environment.
  std::optional<std::chrono::milliseconds> call_timeout;
  // The GPU its workers use (NVML's index, which is PCI bus order): they see only that card
  // (CUDA_VISIBLE_DEVICES) and their reservations are booked on it. Unset: the workers see
  // every card and are booked on GPU 0.
  std::optional<unsigned> device;  // at most kMaxDevice
  // False: this environment's worker is never hibernated (by timer, request or admission).
  bool hibernate = true;
  // Modules a zygote imports once; non-empty turns the zygote on, and workers are forked from
  // it (docs/lifecycle.md#zygotes).
  std::vector<std::string> preload;
  // Start the zygote with the host rather than at the first need.
  bool prestart = false;
};

struct Config {
  HostSettings host;
  std::map<std::string, EnvironmentConfig> environments;
  // Where the configuration came from, for messages.
  std::string source = "(defaults)";
};

// Parses TOML text. Relative `path` and `cwd` entries are resolved against `base_dir`.
// Throws isohost::Error(config_error) naming the source, line and column, and the key.
Config parse_config(const std::string& text, const std::string& source, const std::string& base_dir);

// Reads and parses a file: a regular file of at most 1 MiB. Anything else (missing, a directory,
// a FIFO, a device, too large) throws isohost::Error(config_error) naming the file and what is
// wrong with it; a FIFO never blocks the call.
Config load_config(const std::string& path);

}  // namespace isohost::pool
