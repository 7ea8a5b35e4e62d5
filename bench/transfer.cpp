#include "benchmarks.hpp"
#include "elapsed.hpp"
#include "python_samples.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/runtime_location.hpp"

namespace isohost::bench {
namespace {

constexpr std::size_t k64MiB = 64u << 20;

// The limit: one 64 MiB memcpy between two buffers whose pages are already resident.
Figure memcpy_64mib(int rounds) {
  std::vector<std::byte> from(k64MiB, std::byte{1});
  std::vector<std::byte> to(k64MiB, std::byte{0});
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    from[static_cast<std::size_t>(i)] = std::byte{2};
    const auto start = Clock::now();
    std::memcpy(to.data(), from.data(), k64MiB);
    samples.push_back(elapsed<std::milli>(start));
  }
  if (to[0] != from[0]) throw std::runtime_error("memcpy copied nothing");
  return summarize("transfer.memcpy_64MiB", "ms", samples);
}

// Runs isohost.bench_transfer (python/isohost/bench_transfer.py) through the Python API and
// returns its samples: {"send_64MiB": [ms, ...], "recv_64MiB": [...]}.
nlohmann::ordered_json python_api_samples(const BenchOptions& options, int rounds) {
  return python_samples("PYTHONPATH=" + shell_quote(worker::find_worker_runtime()) + " " +
                            shell_quote(options.python) + " -m isohost.bench_transfer " +
                            std::to_string(rounds),
                        "is the isohost package built for this Python?");
}

}  // namespace

std::vector<Figure> bench_transfer(const BenchOptions& options) {
  const int rounds = std::max(10, options.rounds / 100);
  auto limit = memcpy_64mib(rounds);
  std::vector<Figure> figures{limit};
  const auto samples = python_api_samples(options, rounds);
  for (const char* name : {"send_64MiB", "recv_64MiB"}) {
    auto values = samples.at(name).get<std::vector<double>>();
    auto figure = summarize(std::string("transfer.") + name, "ms", values);
    figure.limit = limit.median;
    figure.limit_name = limit.name;
    figures.push_back(figure);
  }
  return figures;
}

}  // namespace isohost::bench
