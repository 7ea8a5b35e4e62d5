#include "probe/field_line.hpp"

#include <charconv>
#include <limits>

namespace isohost::probe {
namespace {

bool is_key_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '(' || c == ')';
}

bool is_key(std::string_view key) {
  if (key.empty()) return false;
  for (char c : key) {
    if (!is_key_char(c)) return false;
  }
  return true;
}

std::string_view trim_spaces(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

}  // namespace

FieldLine parse_field_line(std::string_view line) {
  FieldLine result;
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_key(line.substr(0, colon))) return result;
  result.key = line.substr(0, colon);
  result.kind = FieldLine::Kind::other_field;

  const std::string_view value = trim_spaces(line.substr(colon + 1));
  uint64_t kib = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), kib);
  if (error != std::errc{} || end == value.data()) return result;
  const std::string_view unit = trim_spaces(value.substr(static_cast<size_t>(end - value.data())));
  if (unit != "kB" || kib > std::numeric_limits<uint64_t>::max() / 1024) return result;
  result.kind = FieldLine::Kind::size;
  result.bytes = kib * 1024;
  return result;
}

}  // namespace isohost::probe
