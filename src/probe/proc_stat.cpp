#include "probe/proc_stat.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "probe/probe_error.hpp"
#include "probe/proc_file.hpp"

namespace isohost::probe {
namespace {

// Field 3 (state) is the first after ") ".
constexpr int first_field_after_comm = 3;
constexpr int parent_field = 4;
constexpr int start_time_field = 22;

[[noreturn]] void throw_malformed(std::string_view source, std::string_view why) {
  throw ProbeError(ProbeError::Cause::malformed, "malformed " + std::string(source) + ": " + std::string(why));
}

// Numeric field `wanted` (counted from 1, as proc(5) does) of /proc/PID/stat text.
template <typename Number>
Number stat_field(std::string_view stat_text, int wanted, std::string_view source) {
  const size_t comm_end = stat_text.rfind(')');
  if (comm_end == std::string_view::npos) throw_malformed(source, "no ')' after the command name");
  std::string_view rest = stat_text.substr(comm_end + 1);
  for (int field = first_field_after_comm;; ++field) {
    const size_t begin = rest.find_first_not_of(" \n");
    if (begin == std::string_view::npos) {
      throw_malformed(source, "fewer than " + std::to_string(wanted) + " fields");
    }
    rest.remove_prefix(begin);
    const size_t end = std::min(rest.find_first_of(" \n"), rest.size());
    if (field == wanted) {
      Number value = 0;
      const auto [parsed_end, error] = std::from_chars(rest.data(), rest.data() + end, value);
      if (error != std::errc{} || parsed_end != rest.data() + end) {
        throw_malformed(source, "field " + std::to_string(wanted) + " is not a number");
      }
      return value;
    }
    rest.remove_prefix(end);
  }
}

ProcessLinks links_from(std::string_view stat_text, std::string_view source) {
  const auto parent = stat_field<pid_t>(stat_text, parent_field, source);
  // Field 3, the first after the command name: there, since field 4 is.
  const auto after_comm = stat_text.substr(stat_text.rfind(')') + 1);
  return ProcessLinks{.state = after_comm[after_comm.find_first_not_of(" \n")], .parent = parent};
}

}  // namespace

uint64_t parse_start_time(std::string_view stat_text) {
  return stat_field<uint64_t>(stat_text, start_time_field, "/proc/PID/stat");
}

uint64_t process_start_time(pid_t pid) {
  return stat_field<uint64_t>(read_proc_file(pid, "stat"), start_time_field,
                              proc_path(pid, "stat"));
}

ProcessLinks parse_links(std::string_view stat_text) {
  return links_from(stat_text, "/proc/PID/stat");
}

ProcessLinks process_links(pid_t pid) {
  return links_from(read_proc_file(pid, "stat"), proc_path(pid, "stat"));
}

uint64_t boot_clock_ticks() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  const auto ticks_per_second = static_cast<uint64_t>(::sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(now.tv_sec) * ticks_per_second +
         static_cast<uint64_t>(now.tv_nsec) * ticks_per_second / 1'000'000'000;
}

std::vector<std::string> split_cmdline(std::string_view text) {
  std::vector<std::string> args;
  while (!text.empty()) {
    const size_t end = text.find('\0');
    if (end == std::string_view::npos) {
      args.emplace_back(text);
      break;
    }
    args.emplace_back(text.substr(0, end));
    text.remove_prefix(end + 1);
  }
  return args;
}

std::vector<std::string> process_cmdline(pid_t pid) { return split_cmdline(read_proc_file(pid, "cmdline")); }

std::optional<std::string> find_environment_value(std::string_view environ_text,
                                                  std::string_view name) {
  while (!environ_text.empty()) {
    const size_t end = std::min(environ_text.find('\0'), environ_text.size());
    const std::string_view entry = environ_text.substr(0, end);
    if (entry.size() > name.size() && entry.substr(0, name.size()) == name &&
        entry[name.size()] == '=') {
      return std::string(entry.substr(name.size() + 1));
    }
    environ_text.remove_prefix(std::min(end + 1, environ_text.size()));
  }
  return std::nullopt;
}

std::string process_environment(pid_t pid) { return read_proc_file(pid, "environ"); }

}  // namespace isohost::probe
