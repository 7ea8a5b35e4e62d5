#include "memory/units.hpp"

#include <array>
#include <charconv>

namespace isohost::memory {

namespace {

// One decimal place, without locale or iostreams.
std::string one_decimal(double value) {
  std::array<char, 32> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value,
                                          std::chars_format::fixed, 1);
  if (error != std::errc{}) return "?";
  return std::string(buffer.data(), end);
}

}  // namespace

std::string mib_text(Bytes bytes) {
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return one_decimal(static_cast<double>(bytes) / static_cast<double>(kMiB)) + " MiB";
}

std::string seconds_text(Duration duration) {
  using std::chrono::milliseconds;
  const auto ms = std::chrono::duration_cast<milliseconds>(duration).count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return one_decimal(static_cast<double>(ms) / 1000.0) + " s";
}

}  // namespace isohost::memory
