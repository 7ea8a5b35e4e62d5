#include "probe/meminfo.hpp"

#include <string>
#include <system_error>

#include "probe/field_line.hpp"
#include "probe/probe_error.hpp"
#include "probe/proc_file.hpp"

namespace isohost::probe {

SystemMemory parse_meminfo(std::string_view text) {
  SystemMemory memory;
  bool has_available = false;
  uint64_t free = 0;
  uint64_t buffers = 0;
  uint64_t cached = 0;
  for_each_line(text, [&](std::string_view line) {
    const FieldLine field = parse_field_line(line);
    if (field.kind != FieldLine::Kind::size) return;
    if (field.key == "MemTotal") {
      memory.total = field.bytes;
    } else if (field.key == "MemAvailable") {
      memory.available = field.bytes;
      has_available = true;
    } else if (field.key == "MemFree") {
      free = field.bytes;
    } else if (field.key == "Buffers") {
      buffers = field.bytes;
    } else if (field.key == "Cached") {
      cached = field.bytes;
    }
  });
  if (!has_available) memory.available = free + buffers + cached;
  return memory;
}

SystemMemory read_system_memory() {
  constexpr const char* path = "/proc/meminfo";
  const FileRead read = read_file(path);
  if (read.error != 0) {
    throw ProbeError(ProbeError::Cause::unreadable,
                     std::string("cannot read ") + path + ": " + std::generic_category().message(read.error));
  }
  return parse_meminfo(read.text);
}

}  // namespace isohost::probe
