#include "worker/hello.hpp"

#include <cstdint>
#include <string>

#include "wire/frame.hpp"

namespace isohost::worker {
namespace {

using Json = nlohmann::ordered_json;
using wire::WireError;

std::string type_of(const Json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number with a fraction";
  return std::string(value.is_array() || value.is_object() ? "an " : "a ") + value.type_name();
}

const Json& required(const Json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end()) throw WireError(std::string("hello has no '") + key + "'");
  return *it;
}

void expect(bool ok, const char* key, const char* wanted, const Json& value) {
  if (!ok) {
    throw WireError(std::string("hello's '") + key + "' must be " + wanted + ", not " +
                    type_of(value));
  }
}

void check_optional(const Json& body, const char* key, bool (*ok)(const Json&),
                    const char* wanted) {
  if (const auto it = body.find(key); it != body.end()) expect(ok(*it), key, wanted, *it);
}

bool string_or_null(const Json& v) { return v.is_string() || v.is_null(); }
bool string(const Json& v) { return v.is_string(); }
bool boolean(const Json& v) { return v.is_boolean(); }
bool strings(const Json& v) {
  if (!v.is_array()) return false;
  for (const auto& item : v) {
    if (!item.is_string()) return false;
  }
  return true;
}

}  // namespace

void check_hello(const Json& body) {
  const auto& op = required(body, "op");
  if (op != "hello") {
    throw WireError("first message was " +
                    (op.is_string() ? "'" + op.get<std::string>() + "'" : type_of(op)) +
                    ", not hello");
  }
  const auto& protocol = required(body, "protocol");
  expect(protocol.is_number_integer(), "protocol", "an integer", protocol);
  if (protocol != wire::kProtocolVersion) {
    throw WireError("worker speaks protocol " + protocol.dump() + "; this host speaks " +
                    std::to_string(wire::kProtocolVersion));
  }
  const auto& pid = required(body, "pid");
  expect(pid.is_number_integer(), "pid", "an integer", pid);
  if (pid.get<std::int64_t>() <= 0)
    throw WireError("hello's 'pid' is " + pid.dump() + ", not a process id");
  check_optional(body, "env", string, "a string");
  check_optional(body, "python", string, "a string");
  check_optional(body, "executable", string, "a string");
  check_optional(body, "torch", string_or_null, "a string or null");
  check_optional(body, "capabilities", strings, "an array of strings");
  check_optional(body, "zygote", boolean, "true or false");
  check_optional(body, "preload", strings, "an array of strings");
  check_optional(body, "refusal", string_or_null, "a string or null");
}

}  // namespace isohost::worker
