#pragma once

// How deeply JSON text nests, measured before it is parsed. A peer's text is parsed, copied,
// compared and printed by code that recurses once per level (nlohmann's dump and copies, the
// Python worker's json module), so a body nested 100000 deep would run the host out of stack:
// every place that takes JSON from a peer refuses text deeper than kMaxJsonDepth first
// (docs/protocol.md, "Limits").
//
//   if (json_depth(text) > kMaxJsonDepth) throw ...;

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace isohost::wire {

// Arrays and objects inside one another; well below what Python's json module takes (about 900
// levels under its default recursion limit), so what the host forwards a worker can decode.
inline constexpr std::size_t kMaxJsonDepth = 256;

// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count),
// or `stop_after` as soon as that depth is reached: the scan ends there. Malformed text is
// measured as far as it goes; the parser that follows names what is wrong with it.
std::size_t json_depth(std::string_view text, std::size_t stop_after = kMaxJsonDepth + 1);

// `text` parsed, or a discarded value (is_discarded()) when it is not JSON or nests deeper than
// kMaxJsonDepth: for callers that answer both the same way.
nlohmann::ordered_json parse_within_depth(std::string_view text);

// The refusal each caller raises: "<what> nests arrays and objects more than 256 levels deep
// (the limit)".
std::string too_deep(std::string_view what);

}  // namespace isohost::wire
