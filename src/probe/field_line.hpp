#pragma once

// The "Key:   123 kB" lines of smaps, smaps_rollup and meminfo. Internal to src/probe/.

#include <cstdint>
#include <string_view>

namespace isohost::probe {

struct FieldLine {
  enum class Kind {
    size,         // "Key: <digits> kB": bytes holds the value in bytes (the kernel's kB is KiB)
    other_field,  // "Key: anything else" (VmFlags, THPeligible, HugePages_Total...)
    not_a_field,  // no "Identifier:" prefix: an smaps mapping header, or a blank line
  };
  Kind kind = Kind::not_a_field;
  std::string_view key;
  uint64_t bytes = 0;
};

// A key is letters, digits, '_', '(' and ')' (meminfo has "Active(anon)"); anything else
// before the first ':' (an smaps header "7f12-7f34 r-xp 00000000 08:01 ..." has spaces and a
// '-') makes the line not a field. Tolerant by design: unknown keys parse, callers ignore them.
FieldLine parse_field_line(std::string_view line);

// Calls on_line(line) for each '\n'-separated line, the last one with or without its newline.
template <typename OnLine>
void for_each_line(std::string_view text, OnLine&& on_line) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    if (end == std::string_view::npos) {
      on_line(text);
      return;
    }
    on_line(text.substr(0, end));
    text.remove_prefix(end + 1);
  }
}

}  // namespace isohost::probe
