#pragma once
// Units shared by the memory arithmetic: byte counts, time values, and how they read in words.
//
// Nothing in src/memory reads a clock: the host's loop reads its steady clock and passes the
// time point in, so every decision here is a pure function of its inputs.

#include <chrono>
#include <cstdint>
#include <string>

namespace isohost::memory {

// Byte counts are unsigned: no figure here is ever negative. Subtractions go through
// saturating_sub, so a snapshot whose parts were read at slightly different moments cannot
// wrap around into an absurd figure.
using Bytes = std::uint64_t;

inline constexpr Bytes kMiB = Bytes{1} << 20;
inline constexpr Bytes kGiB = Bytes{1} << 30;

// n MiB in bytes; reads well in settings and tests: mib(612).
constexpr Bytes mib(std::uint64_t n) noexcept { return n * kMiB; }

// The host's loop uses the steady clock; so does every time value here.
using TimePoint = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;

// a - b, or 0 when b > a.
constexpr Bytes saturating_sub(Bytes a, Bytes b) noexcept { return a > b ? a - b : 0; }

// "688 MiB", or "0.5 MiB" when not a whole number: explanations speak MiB, like nvidia-smi.
std::string mib_text(Bytes bytes);

// "30 s", or "2.5 s" when not a whole number of seconds.
std::string seconds_text(Duration duration);

// A price in seconds: "0 s" for nothing, else two decimals ("0.50 s", "5.44 s"), since the
// planner's prices differ in hundredths.
std::string price_text(double seconds);

// A transfer rate: "0.05 s/GiB", "0.018 s/GiB" (two decimals, a third where it shows).
std::string rate_text(double seconds_per_gib);

}  // namespace isohost::memory
