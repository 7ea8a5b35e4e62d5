#include "pool/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "error/error.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::pool {
namespace {

Error config_error(const std::string& source, const toml::source_region& where,
                   const std::string& message) {
  return Error(ErrorKind::config_error, source + ":" + std::to_string(where.begin.line) + ":" +
                                            std::to_string(where.begin.column) + ": " + message);
}

void reject_unknown_keys(const toml::table& table, const std::set<std::string>& known,
                         const std::string& section, const std::string& source) {
  for (const auto& [key, node] : table) {
    if (!known.contains(std::string(key.str()))) {
      // The known keys beside it, as the adapter's [comfyui] table does: a typo is then
      // corrected from the message alone.
      throw config_error(source, node.source(),
                         fmt::format("unknown key '{}' in [{}] (known: {})", key.str(), section,
                                     fmt::join(known, ", ")));
    }
  }
}

// The value as the file wrote it (`nan`, `1e+300`, `"a\u0000b"`), for messages.
std::string shown(const toml::node& node) {
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

// A key's value refused: the message names the table, the key and the value as the file wrote
// it (`[host] 'call_timeout_seconds' must be a number of seconds, not "5s"`), as a Python dict
// configuration gives no line worth reading.
Error value_error(const std::string& source, const std::string& section, const std::string& key,
                  const toml::node& node, const std::string& rule) {
  return config_error(source, node.source(),
                      "[" + section + "] '" + key + "' " + rule + ", not " + shown(node));
}

// A string as TOML writes it, escapes included (`"a\u0000b"`), for messages.
std::string quoted(const std::string& text) {
  std::ostringstream out;
  out << toml::value<std::string>(text);
  return out.str();
}

// A polling window: a whole number of microseconds, at most a second (more would only burn a
// core for nothing).
std::chrono::microseconds microseconds(const toml::table& table, const std::string& key,
                                       std::chrono::microseconds fallback,
                                       const std::string& source) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  const auto value = node->value_exact<int64_t>();
  if (!value || *value < 0 || *value > 1'000'000) {
    throw value_error(source, "host", key, *node, "must be a whole number from 0 to 1000000");
  }
  return std::chrono::microseconds(*value);
}

// A year: the longest any *_seconds key may be, so that a deadline (now + timeout, in the
// nanoseconds of steady_clock) can never overflow.
constexpr std::int64_t kMaxSeconds = 365LL * 24 * 3600;

std::chrono::milliseconds seconds(const toml::table& table, const std::string& key,
                                  std::chrono::milliseconds fallback, const std::string& source,
                                  const std::string& section) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  double value = 0;
  if (auto i = node->value_exact<int64_t>()) {
    value = static_cast<double>(*i);
  } else if (auto d = node->value_exact<double>()) {
    value = *d;
  } else {
    throw value_error(source, section, key, *node, "must be a number of seconds");
  }
  // Written so that NaN fails it too.
  if (!(std::isfinite(value) && value >= 0 && value <= static_cast<double>(kMaxSeconds))) {
    throw value_error(source, section, key, *node,
                      "must be between 0 and " + std::to_string(kMaxSeconds) + " seconds (a year)");
  }
  const auto ms = std::chrono::milliseconds(static_cast<int64_t>(value * 1000));
  // Zero means never (or no timeout) for several keys: a tiny positive value must not become it.
  if (value > 0 && ms.count() == 0) {
    throw value_error(source, section, key, *node,
                      "must be 0 or at least 0.001 seconds (a millisecond)");
  }
  return ms;
}

// 10^12 MB (an exabyte) and 2^40 MiB (an exbibyte): far beyond any machine, and the product in
// bytes fits a signed 64-bit integer with room to add to it.
constexpr std::int64_t kMaxMegabytes = 1'000'000'000'000;
constexpr std::int64_t kMaxMebibytes = std::int64_t{1} << 40;

// MB as the seed and `isohost ps` print RAM: 10^6 bytes.
std::uint64_t megabytes(const toml::table& table, const std::string& key, const std::string& source) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return 0;
  const auto value = node->value_exact<int64_t>();
  if (!value || *value < 0 || *value > kMaxMegabytes) {
    throw value_error(source, "host", key, *node,
                      "must be a whole number of MB from 0 to " + std::to_string(kMaxMegabytes) +
                          " (an exabyte)");
  }
  return static_cast<std::uint64_t>(*value) * 1'000'000;
}

// MiB as NVML and `isohost ps` print VRAM: 2^20 bytes.
std::uint64_t mebibytes(const toml::table& table, const std::string& key, std::uint64_t fallback,
                        const std::string& source) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  const auto value = node->value_exact<int64_t>();
  if (!value || *value < 0 || *value > kMaxMebibytes) {
    throw value_error(source, "host", key, *node,
                      "must be a whole number of MiB from 0 to " + std::to_string(kMaxMebibytes) +
                          " (an exbibyte)");
  }
  return static_cast<std::uint64_t>(*value) << 20;
}

// Paths, names and variables end up as C strings (execve, chdir, setenv): a NUL would cut them.
void refuse_nul(const std::string& text, const toml::node& node, const std::string& key,
                const std::string& source, const std::string& section) {
  if (text.find('\0') != std::string::npos) {
    throw value_error(source, section, key, node, "must not contain a NUL character");
  }
}

std::string string_value(const toml::node& node, const std::string& key, const std::string& source,
                         const std::string& section) {
  auto value = node.value_exact<std::string>();
  if (!value) throw value_error(source, section, key, node, "must be a string");
  refuse_nul(*value, node, key, source, section);
  return *value;
}

std::string resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || std::filesystem::path(path).is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

// An interpreter given as a relative path ("envs/a/bin/python") is relative to the file; a
// bare name ("python3") is looked up on PATH at spawn.
std::string resolve_program(const std::string& program, const std::string& base_dir) {
  return program.find('/') == std::string::npos ? program : resolve(program, base_dir);
}

HostSettings parse_host(const toml::table& table, const std::string& source, const std::string& base_dir) {
  reject_unknown_keys(
      table,
      {"call_timeout_seconds", "start_timeout_seconds", "idle_release_seconds", "idle_reap_seconds",
       "shutdown_grace_seconds", "ram_budget_mb", "ram_floor_mb", "vram_reserve_mib",
       "admission_wait_seconds", "grant_lifetime_seconds", "simulated_gpu",
       "idle_hibernate_seconds", "idle_sleep_seconds", "worker_poll_microseconds",
       "loop_poll_after_call_microseconds"},
      "host", source);
  HostSettings host;
  host.call_timeout = seconds(table, "call_timeout_seconds", host.call_timeout, source, "host");
  host.start_timeout = seconds(table, "start_timeout_seconds", host.start_timeout, source, "host");
  host.idle_release = seconds(table, "idle_release_seconds", host.idle_release, source, "host");
  host.idle_reap = seconds(table, "idle_reap_seconds", host.idle_reap, source, "host");
  host.shutdown_grace =
      seconds(table, "shutdown_grace_seconds", host.shutdown_grace, source, "host");
  host.ram_budget = megabytes(table, "ram_budget_mb", source);
  host.ram_floor = megabytes(table, "ram_floor_mb", source);
  host.vram_reserve = mebibytes(table, "vram_reserve_mib", host.vram_reserve, source);
  host.admission_wait =
      seconds(table, "admission_wait_seconds", host.admission_wait, source, "host");
  host.grant_lifetime =
      seconds(table, "grant_lifetime_seconds", host.grant_lifetime, source, "host");
  if (const auto* node = table.get("simulated_gpu")) {
    host.simulated_gpu = resolve(string_value(*node, "simulated_gpu", source, "host"), base_dir);
  }
  host.idle_hibernate =
      seconds(table, "idle_hibernate_seconds", host.idle_hibernate, source, "host");
  host.idle_sleep = seconds(table, "idle_sleep_seconds", host.idle_sleep, source, "host");
  host.worker_poll = microseconds(table, "worker_poll_microseconds", host.worker_poll, source);
  host.loop_poll_after_call =
      microseconds(table, "loop_poll_after_call_microseconds", host.loop_poll_after_call, source);
  return host;
}

// `preload` names modules (the zygote gets them comma-joined); `prestart` needs a zygote.
void parse_zygote_keys(const toml::table& table, EnvironmentConfig& env, const std::string& source,
                       const std::string& section) {
  if (const auto* node = table.get("preload")) {
    const auto* list = node->as_array();
    if (list == nullptr)
      throw value_error(source, section, "preload", *node, "must be a list of module names");
    for (const auto& item : *list) {
      auto name = string_value(item, "preload", source, section);
      if (name.empty() || name.find_first_of(", \t") != std::string::npos) {
        throw config_error(source, item.source(),
                           "[" + section + "] 'preload' entry '" + name + "' is not a module name");
      }
      env.preload.push_back(std::move(name));
    }
  }
  if (const auto* node = table.get("prestart")) {
    const auto value = node->value_exact<bool>();
    if (!value) throw value_error(source, section, "prestart", *node, "must be true or false");
    if (*value && env.preload.empty()) {
      throw config_error(source, node->source(),
                         "[" + section +
                             "] 'prestart' starts a zygote, which needs a non-empty "
                             "'preload'");
    }
    env.prestart = *value;
  }
}

EnvironmentConfig parse_environment(const std::string& name, const toml::table& table,
                                    const std::string& source, const std::string& base_dir) {
  const std::string section = "env." + name;
  reject_unknown_keys(table,
                      {"python", "path", "cwd", "env", "call_timeout_seconds", "device",
                       "hibernate", "preload", "prestart"},
                      section, source);
  EnvironmentConfig env;
  env.name = name;
  if (const auto* node = table.get("python")) {
    env.python = resolve_program(string_value(*node, "python", source, section), base_dir);
  }
  if (const auto* node = table.get("path")) {
    const auto* list = node->as_array();
    if (list == nullptr)
      throw value_error(source, section, "path", *node, "must be a list of directories");
    for (const auto& item : *list)
      env.path.push_back(resolve(string_value(item, "path", source, section), base_dir));
  }
  if (const auto* node = table.get("cwd"))
    env.cwd = resolve(string_value(*node, "cwd", source, section), base_dir);
  if (const auto* node = table.get("env")) {
    const auto* vars = node->as_table();
    if (vars == nullptr)
      throw value_error(source, section, "env", *node, "must be a table of variables");
    for (const auto& [key, value] : *vars) {
      const std::string variable(key.str());
      if (variable.empty() || variable.find_first_of(std::string("=\0", 2)) != std::string::npos) {
        throw config_error(source, key.source(),
                           "[" + section + "] 'env' variable name " + quoted(variable) +
                               " must be non-empty, without '=' or a NUL character");
      }
      env.env[variable] = string_value(value, "env." + variable, source, section);
    }
  }
  if (table.contains("call_timeout_seconds")) {
    env.call_timeout = seconds(table, "call_timeout_seconds", {}, source, section);
  }
  if (const auto* node = table.get("device")) {
    const auto index = node->value_exact<int64_t>();
    if (!index || *index < 0 || *index > kMaxDevice) {
      throw value_error(source, section, "device", *node,
                        "must be a GPU index from 0 to " + std::to_string(kMaxDevice));
    }
    env.device = static_cast<unsigned>(*index);
  }
  if (const auto* node = table.get("hibernate")) {
    const auto value = node->value_exact<bool>();
    if (!value) throw value_error(source, section, "hibernate", *node, "must be true or false");
    env.hibernate = *value;
  }
  parse_zygote_keys(table, env, source, section);
  return env;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& source, const std::string& base_dir) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw config_error(source, e.source(), std::string(e.description()));
  }
  reject_unknown_keys(root, {"host", "env"}, "top level", source);
  Config config;
  config.source = source;
  if (const auto* node = root.get("host")) {
    const auto* table = node->as_table();
    if (table == nullptr)
      throw config_error(source, node->source(), "[host] must be a table, not " + shown(*node));
    config.host = parse_host(*table, source, base_dir);
  }
  if (const auto* node = root.get("env")) {
    const auto* envs = node->as_table();
    if (envs == nullptr) {
      throw config_error(source, node->source(),
                         "[env] must hold [env.NAME] tables, not " + shown(*node));
    }
    for (const auto& [name, value] : *envs) {
      if (std::string(name.str()).find('\0') != std::string::npos) {
        throw config_error(source, name.source(),
                           "environment name " + quoted(std::string(name.str())) +
                               " must not contain a NUL character");
      }
      const auto* table = value.as_table();
      if (table == nullptr) {
        throw config_error(
            source, value.source(),
            "[env." + std::string(name.str()) + "] must be a table, not " + shown(value));
      }
      config.environments[std::string(name.str())] =
          parse_environment(std::string(name.str()), *table, source, base_dir);
    }
  }
  return config;
}

namespace {

// A configuration is a few kilobytes; anything near this is not one (or is /dev/zero's kin).
constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

Error file_error(const std::string& path, const std::string& why) {
  return Error(ErrorKind::config_error, "configuration file '" + path + "': " + why);
}

// Only a regular file of at most kMaxConfigBytes is read: a directory, a FIFO (which would block
// until a writer came) or a device (/dev/zero never ends) is refused by name.
void check_file(const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) throw file_error(path, "is a directory");
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    throw file_error(path, std::string("is ") + kind + ", not a regular file");
  }
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxConfigBytes) {
    throw file_error(path, "is " + std::to_string(st.st_size) +
                               " bytes, over the limit of 1 MiB for a configuration");
  }
}

std::string errno_text(int error) {
  return error == ENOENT ? "no such file" : std::strerror(error);
}

std::string read_config_file(const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    throw file_error(path, "the path contains a NUL character");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw file_error(path, errno_text(errno));
  check_file(path, st);
  // O_NONBLOCK: should the path become a FIFO between stat and open, open does not wait for a
  // writer. The descriptor is checked again, as it is what is read.
  const wire::UniqueFd file(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!file) throw file_error(path, errno_text(errno));
  if (::fstat(file.get(), &st) != 0) throw file_error(path, errno_text(errno));
  check_file(path, st);
  std::string text;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(file.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw file_error(path, errno_text(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      throw file_error(path, "is over the limit of 1 MiB for a configuration");
    }
  }
  return text;
}

}  // namespace

Config load_config(const std::string& path) {
  const auto text = read_config_file(path);
  const auto base = std::filesystem::absolute(path).parent_path().string();
  return parse_config(text, path, base);
}

}  // namespace isohost::pool
