#include "control/control_request.hpp"

#include <asio/post.hpp>

#include "wire/json_depth.hpp"

namespace isohost::control {
namespace {

using pool::Request;
using worker::Error;
using worker::ErrorKind;

nlohmann::json success(nlohmann::json value) { return {{"ok", true}, {"value", std::move(value)}}; }

Error bad_request(const std::string& message) { return Error(ErrorKind::bad_request, message); }

std::string required_string(const nlohmann::json& request, const char* key) {
  const auto it = request.find(key);
  if (it == request.end() || !it->is_string()) {
    throw bad_request(std::string("request needs a string field '") + key + "'");
  }
  return it->get<std::string>();
}

Request parse_env_request(const nlohmann::json& request, Request::Kind kind) {
  Request out{kind, required_string(request, "env")};
  if (kind == Request::Kind::call) {
    out = Request::call(out.env, required_string(request, "target"),
                        request.value("args", nlohmann::json::array()),
                        request.value("kwargs", nlohmann::json::object()));
  }
  return out;
}

}  // namespace

nlohmann::json failure(const Error& error) { return {{"ok", false}, {"error", error.to_json()}}; }

void handle_request(pool::Pool& pool, const std::string& line,
                    const std::function<void(const nlohmann::json&)>& reply) {
  try {
    if (wire::json_depth(line) > wire::kMaxJsonDepth)
      throw bad_request(wire::too_deep("the request"));
    const auto request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded() || !request.is_object()) {
      throw bad_request("request is not a JSON object on one line");
    }
    const auto op = required_string(request, "op");
    if (op == "ps") {
      pool.status_with_memory_on_loop(
          [reply](const pool::PoolStatus& status) { reply(success(status.to_json())); });
    } else if (op == "shutdown") {
      reply(success({{"shutting_down", true}}));
      // After the answer is queued, so the client hears it before the socket goes.
      asio::post(pool.io(), [&pool] { pool.request_shutdown(); });
    } else if (op == "call" || op == "release" || op == "reap" || op == "hibernate" || op == "wake") {
      const auto kind = op == "call"        ? Request::Kind::call
                        : op == "release"   ? Request::Kind::release
                        : op == "hibernate" ? Request::Kind::hibernate
                        : op == "wake"      ? Request::Kind::wake
                                            : Request::Kind::reap;
      pool.submit_on_loop(parse_env_request(request, kind), [reply](worker::Outcome outcome) {
        reply(outcome.ok() ? success(outcome.value()) : failure(outcome.error()));
      });
    } else {
      throw bad_request("unknown op '" + op + "'; known: call, ps, release, reap, hibernate, wake, shutdown");
    }
  } catch (const Error& e) {
    reply(failure(e));
  } catch (const nlohmann::json::exception& e) {
    reply(failure(bad_request(std::string("malformed request: ") + e.what())));
  }
}

}  // namespace isohost::control
