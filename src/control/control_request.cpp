#include "control/control_request.hpp"

#include <asio/post.hpp>

#include "control/request_line.hpp"
#include "control/status_json.hpp"

namespace isohost::control {
namespace {

using pool::Request;

// `metrics` is asked every second by each view (top, the page, a Prometheus scrape): its memory
// figures may be this old, so views never walk the workers' smaps_rollup more than once a second
// between them.
constexpr std::chrono::milliseconds kMetricsSampleAge{1000};

nlohmann::ordered_json success(nlohmann::ordered_json value) {
  return {{"ok", true}, {"value", std::move(value)}};
}

nlohmann::ordered_json metrics_json(const pool::PoolMetrics& metrics) {
  nlohmann::ordered_json envs = nlohmann::ordered_json::object();
  for (const auto& [name, env] : metrics.envs) envs[name] = env.to_json(metrics.taken_at);
  return {{"status", status_json(metrics.status)},
          {"sample_age_seconds", metrics.sample_age_seconds},
          {"uptime_seconds", metrics.uptime_seconds},
          {"ram_sweeps", metrics.ram_sweeps},
          {"envs", std::move(envs)}};
}

Request::Kind env_request_kind(const std::string& op) {
  if (op == "call") return Request::Kind::call;
  if (op == "release") return Request::Kind::release;
  if (op == "hibernate") return Request::Kind::hibernate;
  if (op == "sleep") return Request::Kind::sleep;
  if (op == "wake") return Request::Kind::wake;
  return Request::Kind::reap;
}

}  // namespace

nlohmann::ordered_json failure(const Error& error) {
  return {{"ok", false}, {"error", error.to_json()}};
}

void handle_request(pool::Pool& pool, const std::string& line,
                    const std::function<void(const nlohmann::ordered_json&)>& reply) {
  RequestLine request;
  try {
    request = parse_request_line(line);
  } catch (const Error& e) {
    reply(failure(e));
    return;
  }
  if (request.op == "ps") {
    pool.status_with_memory_on_loop(
        [reply](const pool::PoolStatus& status) { reply(success(status_json(status))); });
  } else if (request.op == "metrics") {
    pool.metrics_on_loop(kMetricsSampleAge, [reply](const pool::PoolMetrics& metrics) {
      reply(success(metrics_json(metrics)));
    });
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
