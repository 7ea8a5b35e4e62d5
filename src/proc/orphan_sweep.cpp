#include "proc/orphan_sweep.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "probe/probe_error.hpp"
#include "probe/proc_stat.hpp"
#include "proc/process_tree.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::proc {
namespace {

constexpr std::string_view kWorkerMarker = "isohost_worker";

struct HostIdentity {
  pid_t pid = 0;
  unsigned long long start_time = 0;
};

bool parse_tag(std::string_view tag, HostIdentity& out) {
  const auto colon = tag.find(':');
  if (colon == std::string_view::npos) return false;
  const auto* begin = tag.data();
  auto [p1, e1] = std::from_chars(begin, begin + colon, out.pid);
  auto [p2, e2] = std::from_chars(begin + colon + 1, begin + tag.size(), out.start_time);
  return e1 == std::errc{} && e2 == std::errc{} && p1 == begin + colon &&
         p2 == begin + tag.size() && out.pid > 0;
}

bool host_alive(const HostIdentity& host) {
  try {
    return probe::process_start_time(host.pid) == host.start_time;
  } catch (const probe::ProbeError&) {
    return false;
  }
}

// The host tag of `pid` if it is an isohost worker, read from its command line.
std::optional<std::string> worker_tag(pid_t pid) {
  std::vector<std::string> args;
  try {
    args = probe::process_cmdline(pid);
  } catch (const probe::ProbeError&) {
    return std::nullopt;
  }
  bool is_worker = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    is_worker = is_worker || args[i].find(kWorkerMarker) != std::string::npos;
    if (args[i] == "--host" && i + 1 < args.size()) {
      if (is_worker) return args[i + 1];
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string host_tag() {
  return std::to_string(::getpid()) + ":" + std::to_string(probe::process_start_time(::getpid()));
}

OrphanSweep sweep_orphans() {
  OrphanSweep swept;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return swept;
  const uid_t me = ::getuid();
  const char* own = std::getenv(kHostTagVariable);
  const std::string own_tag = own == nullptr ? "" : own;
  while (const dirent* entry = ::readdir(proc)) {
    pid_t pid = 0;
    const std::string_view name(entry->d_name);
    auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec != std::errc{} || ptr != name.data() + name.size() || pid == ::getpid() || pid == 1) {
      continue;
    }
    // Held before anything is read: the checks below then read the process the signal goes
    // to, or one that replaced it after it died, which the pidfd then refuses (ESRCH); a plain
    // kill(pid) could hit a stranger that took a recycled pid.
    const wire::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd) continue;
    struct stat st {};
    const std::string dir = "/proc/" + std::to_string(pid);
    if (::stat(dir.c_str(), &st) != 0 || st.st_uid != me) continue;
    auto tag = worker_tag(pid);
    const bool worker = tag.has_value();
    if (!worker) tag = environment_host_tag(pid);
    HostIdentity host;
    if (!tag || *tag == own_tag || !parse_tag(*tag, host) || host_alive(host)) continue;
    // A worker leads its own group, and so does a process that called setsid(); take whatever
    // it started there along with it, while the leader is alive (so its group id cannot have
    // been reused).
    if (::syscall(SYS_pidfd_send_signal, pidfd.get(), 0, nullptr, 0) != 0) continue;
    if (::getpgid(pid) == pid) ::killpg(pid, SIGKILL);
    ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    (worker ? swept.workers : swept.escaped).push_back(pid);
  }
  ::closedir(proc);
  return swept;
}

std::vector<pid_t> sweep_orphaned_workers() {
  auto swept = sweep_orphans();
  for (pid_t pid : swept.escaped) {
    spdlog::warn(
        "ended pid {} left behind by a host that is gone: a worker of it started it, "
        "and it had left the worker's process group",
        pid);
  }
  return std::move(swept.workers);
}

}  // namespace isohost::proc
