#include "control/request_line.hpp"

#include <algorithm>
#include <iterator>

#include "error/error.hpp"
#include "wire/json_depth.hpp"

namespace isohost::control {
namespace {

Error bad_request(const std::string& message) { return Error(ErrorKind::bad_request, message); }

std::string required_string(const nlohmann::ordered_json& request, const char* key) {
  const auto it = request.find(key);
  if (it == request.end() || !it->is_string()) {
    throw bad_request(std::string("request needs a string field '") + key + "'");
  }
  return it->get<std::string>();
}

nlohmann::ordered_json optional_of_type(const nlohmann::ordered_json& request, const char* key,
                                        nlohmann::ordered_json fallback) {
  const auto it = request.find(key);
  if (it == request.end()) return fallback;
  if (it->type() != fallback.type()) {
    throw bad_request(std::string("'") + key + "' must be a JSON " + fallback.type_name() + ", not " +
                      it->type_name());
  }
  return *it;
}

bool known_op(const std::string& op) {
  return std::find(std::begin(kRequestOps), std::end(kRequestOps), op) != std::end(kRequestOps);
}

}  // namespace

RequestLine parse_request_line(const std::string& line) {
  if (wire::json_depth(line) > wire::kMaxJsonDepth) throw bad_request(wire::too_deep("the request"));
  const auto request = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    throw bad_request("request is not a JSON object on one line");
  }
  RequestLine out{.op = required_string(request, "op")};
  if (!known_op(out.op)) {
    std::string known;
    for (const char* op : kRequestOps) known += (known.empty() ? "" : ", ") + std::string(op);
    throw bad_request("unknown op '" + out.op + "'; known: " + known);
  }
  if (out.op == "ps" || out.op == "metrics" || out.op == "shutdown") return out;
  out.env = required_string(request, "env");
  if (out.op == "call") {
    out.target = required_string(request, "target");
    out.args = optional_of_type(request, "args", nlohmann::ordered_json::array());
    out.kwargs = optional_of_type(request, "kwargs", nlohmann::ordered_json::object());
  }
  return out;
}

}  // namespace isohost::control
