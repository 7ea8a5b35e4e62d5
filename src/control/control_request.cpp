#include "control/control_request.hpp"

#include <asio/post.hpp>

#include "control/request_line.hpp"

namespace isohost::control {
namespace {

using pool::Request;
using worker::Error;

nlohmann::json success(nlohmann::json value) { return {{"ok", true}, {"value", std::move(value)}}; }

Request::Kind env_request_kind(const std::string& op) {
  if (op == "call") return Request::Kind::call;
  if (op == "release") return Request::Kind::release;
  if (op == "hibernate") return Request::Kind::hibernate;
  if (op == "wake") return Request::Kind::wake;
  return Request::Kind::reap;
}

}  // namespace

nlohmann::json failure(const Error& error) { return {{"ok", false}, {"error", error.to_json()}}; }

void handle_request(pool::Pool& pool, const std::string& line,
                    const std::function<void(const nlohmann::json&)>& reply) {
  RequestLine request;
  try {
    request = parse_request_line(line);
  } catch (const Error& e) {
    reply(failure(e));
    return;
  }
  if (request.op == "ps") {
    pool.status_with_memory_on_loop(
        [reply](const pool::PoolStatus& status) { reply(success(status.to_json())); });
  } else if (request.op == "shutdown") {
    reply(success({{"shutting_down", true}}));
    // After the answer is queued, so the client hears it before the socket goes.
    asio::post(pool.io(), [&pool] { pool.request_shutdown(); });
  } else {
    const auto kind = env_request_kind(request.op);
    auto submitted = kind == Request::Kind::call
                         ? Request::call(request.env, request.target, std::move(request.args),
                                         std::move(request.kwargs))
                         : Request{kind, request.env};
    pool.submit_on_loop(std::move(submitted), [reply](worker::Outcome outcome) {
      reply(outcome.ok() ? success(outcome.value()) : failure(outcome.error()));
    });
  }
}

}  // namespace isohost::control
