#include "benchmarks.hpp"
#include "elapsed.hpp"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include <asio/post.hpp>

#include "pool/caller_polling.hpp"
#include "pool/pool.hpp"

namespace isohost::bench {
namespace {

// The floor for any host-worker exchange: a 64-byte message to another process over a
// socketpair and back, with a blocking reader on each side.
Figure raw_socketpair_round_trip(int rounds) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pair[0]);
    char buffer[64];
    for (;;) {
      if (::read(pair[1], buffer, sizeof buffer) != sizeof buffer) ::_exit(0);
      if (::write(pair[1], buffer, sizeof buffer) != sizeof buffer) ::_exit(0);
    }
  }
  ::close(pair[1]);
  char message[64] = {};
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    if (::write(pair[0], message, sizeof message) != sizeof message ||
        ::read(pair[0], message, sizeof message) != sizeof message) {
      break;
    }
    samples.push_back(elapsed<std::micro>(start));
  }
  ::close(pair[0]);
  ::waitpid(child, nullptr, 0);
  return summarize("rtt.raw_socketpair", "us", samples);
}

// The same calls issued from the pool's own loop thread (as the control server does): what a
// call costs without the two wake-ups between a caller's thread and the loop.
Figure calls_from_the_loop(pool::Pool& pool, int rounds) {
  struct Chain {
    pool::Pool& pool;
    int left;
    std::vector<double> samples;
    std::promise<void> done;
    Clock::time_point start;
    void next() {
      if (left-- == 0) {
        done.set_value();
        return;
      }
      start = Clock::now();
      pool.submit_on_loop(pool::Request::call("bench", "operator:add", {1, 2}), [this](worker::Outcome) {
        samples.push_back(elapsed<std::micro>(start));
        next();
      });
    }
  };
  Chain chain{pool, rounds, {}, {}, {}};
  chain.samples.reserve(static_cast<std::size_t>(rounds));
  auto finished = chain.done.get_future();
  asio::post(pool.io(), [&chain] { chain.next(); });
  finished.wait();
  return summarize("rtt.call_on_loop", "us", chain.samples);
}

// Warm calls from this thread, as an embedding program makes them, each waiting on its future
// as the Python API waits (pool/caller_polling.hpp), or sleeping on it at once.
Figure calls_from_a_thread(pool::Pool& pool, int rounds, const char* name, bool caller_polls) {
  const auto args = nlohmann::ordered_json::array({1, 2});
  pool.call("bench", "operator:add", args).get();  // cold start, not measured
  for (int i = 0; i < rounds / 10; ++i) pool.call("bench", "operator:add", args).get();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(rounds));
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    auto result = pool.call("bench", "operator:add", args);
    if (caller_polls) pool::wait_polling(result);
    result.get();
    samples.push_back(elapsed<std::micro>(start));
  }
  return summarize(name, "us", samples);
}

}  // namespace

std::vector<Figure> bench_rtt(const BenchOptions& options) {
  auto raw = raw_socketpair_round_trip(options.rounds);
  pool::Config config;
  config.environments["bench"] = pool::EnvironmentConfig{.name = "bench", .python = options.python};
  std::vector<Figure> figures{raw};
  {
    pool::Pool pool(config);
    figures.push_back(calls_from_a_thread(pool, options.rounds, "rtt.call", true));
    figures.push_back(calls_from_the_loop(pool, options.rounds));
  }
  {
    // The same with a loop, a worker and a caller that sleep as soon as they are idle: what
    // polling saves.
    config.host.worker_poll = std::chrono::microseconds(0);
    pool::Pool pool(config, pool::PoolOptions{.poll_window = std::chrono::microseconds(0)});
    figures.push_back(calls_from_a_thread(pool, options.rounds, "rtt.call_without_polling", false));
  }
  for (std::size_t i = 1; i < figures.size(); ++i) {
    figures[i].limit = raw.median;
    figures[i].limit_name = "rtt.raw_socketpair";
  }
  return figures;
}

}  // namespace isohost::bench
