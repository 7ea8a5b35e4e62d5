// A line from a control client: parsed, or refused with BadRequest; never a crash.

#include <cstddef>
#include <cstdint>
#include <string>

#include "control/request_line.hpp"
#include "error/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto line = isohost::control::parse_request_line(std::string(reinterpret_cast<const char*>(data), size));
    (void)line.args.dump();
  } catch (const isohost::Error& e) {
    if (e.kind() != isohost::ErrorKind::bad_request) __builtin_trap();
  }
  return 0;
}
