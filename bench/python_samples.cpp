#include "python_samples.hpp"

#include <cstdio>
#include <memory>
#include <stdexcept>

namespace isohost::bench {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

nlohmann::ordered_json python_samples(const std::string& command, const std::string& hint) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string output;
  char chunk[4096];
  while (std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe.get())) output.append(chunk, n);
  const int status = ::pclose(pipe.release());
  // The samples are the last line; the host's log lines may come before it.
  const auto last_line = output.find_last_of('\n', output.size() > 1 ? output.size() - 2 : 0);
  auto samples = nlohmann::ordered_json::parse(
      last_line == std::string::npos ? output : output.substr(last_line + 1), nullptr,
      /*allow_exceptions=*/false);
  if (status != 0 || !samples.is_object()) {
    throw std::runtime_error(command + " failed (status " + std::to_string(status) + "): " + hint +
                             "\n" + output);
  }
  return samples;
}

}  // namespace isohost::bench
