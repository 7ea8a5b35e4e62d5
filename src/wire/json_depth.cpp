#include "wire/json_depth.hpp"

namespace isohost::wire {

std::size_t json_depth(std::string_view text, std::size_t stop_after) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest >= stop_after) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::ordered_json parse_within_depth(std::string_view text) {
  if (json_depth(text) > kMaxJsonDepth)
    return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string too_deep(std::string_view what) {
  return std::string(what) + " nests arrays and objects more than " +
         std::to_string(kMaxJsonDepth) + " levels deep (the limit)";
}

}  // namespace isohost::wire
