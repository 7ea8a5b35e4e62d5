#include "benchmarks.hpp"
#include "elapsed.hpp"

#include <cstdio>
#include <cstring>
#include <memory>
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

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs isohost.bench_transfer (python/isohost/bench_transfer.py) through the Python API and
// returns its samples: {"send_64MiB": [ms, ...], "recv_64MiB": [...]}.
nlohmann::json python_api_samples(const BenchOptions& options, int rounds) {
  const std::string command = "PYTHONPATH=" + shell_quote(worker::find_worker_runtime()) + " " +
                              shell_quote(options.python) + " -m isohost.bench_transfer " +
                              std::to_string(rounds);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string output;
  char chunk[4096];
  while (std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe.get())) output.append(chunk, n);
  const int status = ::pclose(pipe.release());
  // The samples are the last line; the host's log lines may come before it.
  const auto last_line = output.find_last_of('\n', output.size() > 1 ? output.size() - 2 : 0);
  auto samples =
      nlohmann::json::parse(last_line == std::string::npos ? output : output.substr(last_line + 1),
                            nullptr, /*allow_exceptions=*/false);
  if (status != 0 || !samples.is_object()) {
    throw std::runtime_error(command + " failed (status " + std::to_string(status) +
                             "): is the isohost package built for this Python? " + output);
  }
  return samples;
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
