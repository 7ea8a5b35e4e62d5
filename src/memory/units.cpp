#include "memory/units.hpp"

#include <array>
#include <charconv>

namespace isohost::memory {

namespace {

// `decimals` decimal places, without locale or iostreams.
std::string fixed_decimals(double value, int decimals) {
  std::array<char, 64> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value,
                                          std::chars_format::fixed, decimals);
  if (error != std::errc{}) return "?";
  return std::string(buffer.data(), end);
}

std::string one_decimal(double value) { return fixed_decimals(value, 1); }

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

std::string price_text(double seconds) {
  if (seconds == 0) return "0 s";
  return fixed_decimals(seconds, 2) + " s";
}

std::string rate_text(double seconds_per_gib) {
  std::string text = fixed_decimals(seconds_per_gib, 3);
  if (text.size() > 1 && text.back() == '0') text.pop_back();
  return text + " s/GiB";
}

}  // namespace isohost::memory
