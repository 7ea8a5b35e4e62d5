#include "proc/process_tree.hpp"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "probe/probe_error.hpp"
#include "probe/proc_stat.hpp"
#include "proc/process_group.hpp"
#include "wire/unique_fd.hpp"

namespace isohost::proc {
namespace {

// Passes over a tree that keeps growing (a fork bomb) before giving up on it.
constexpr int kMaxPasses = 8;
// Parent links followed at most; a chain longer than this is judged nothing.
constexpr int kMaxDepth = 4096;

// Calls `visit(pid)` for every process in /proc.
template <typename Visit>
void for_each_process(Visit&& visit) {
  const std::unique_ptr<DIR, int (*)(DIR*)> proc(::opendir("/proc"), ::closedir);
  if (!proc) return;
  while (const dirent* entry = ::readdir(proc.get())) {
    pid_t pid = 0;
    const std::string_view name(entry->d_name);
    auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec == std::errc{} && ptr == name.data() + name.size() && pid > 0) visit(pid);
  }
}

std::optional<probe::ProcessLinks> links_of(pid_t pid) {
  try {
    return probe::process_links(pid);
  } catch (const probe::ProbeError&) {
    return std::nullopt;  // ended meanwhile
  }
}

wire::UniqueFd pidfd_for(pid_t pid) {
  return wire::UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

bool send_signal(const wire::UniqueFd& pidfd, int signal) {
  return ::syscall(SYS_pidfd_send_signal, pidfd.get(), signal, nullptr, 0) == 0;
}

// Every process below `root`, from one pass over /proc.
std::vector<pid_t> descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  for_each_process([&](pid_t pid) {
    if (const auto links = links_of(pid)) children[links->parent].push_back(pid);
  });
  std::vector<pid_t> found;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    const auto it = children.find(frontier.back());
    frontier.pop_back();
    if (it == children.end()) continue;
    found.insert(found.end(), it->second.begin(), it->second.end());
    frontier.insert(frontier.end(), it->second.begin(), it->second.end());
  }
  return found;
}

// Whether `pid` descends from `ancestor`, through a fresh read of each parent link; nullopt
// when a link could not be read (a process on the chain ended while it was followed).
std::optional<bool> descends_from(pid_t pid, pid_t ancestor) {
  pid_t current = pid;
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    const auto links = links_of(current);
    if (!links) return std::nullopt;
    if (links->parent == ancestor) return true;
    if (links->parent <= 1) return false;  // init took it (or it is init, or a kernel thread)
    current = links->parent;
  }
  return std::nullopt;
}

// Outside this process's tree, by two walks that agree: one walk can meet a parent that ended
// after its child read its link, while the child was re-parented to a worker (a subreaper).
bool escaped_from(pid_t pid, pid_t host) {
  int outside = 0;
  for (int attempt = 0; attempt < 4 && outside < 2; ++attempt) {
    const auto held = descends_from(pid, host);
    if (held == true) return false;
    if (held == false) ++outside;
  }
  return outside >= 2;
}

bool owned_by_me(pid_t pid) {
  struct stat st {};
  const std::string dir = "/proc/" + std::to_string(pid);
  return ::stat(dir.c_str(), &st) == 0 && st.st_uid == ::getuid();
}

}  // namespace

std::optional<std::string> environment_host_tag(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  try {
    for (;;) {
      const auto environment = probe::process_environment(pid);
      if (!environment.empty()) return probe::find_environment_value(environment, kHostTagVariable);
      // Empty: a zombie, a kernel thread (a child of kthreadd, pid 2), a process exec'ed with
      // no environment at all (its command line is there), or one in the middle of an exec,
      // between its new memory and its new arguments and environment.
      const auto links = probe::process_links(pid);
      if (links.state == 'Z' || pid == 2 || links.parent == 2) return std::nullopt;
      if (!probe::process_cmdline(pid).empty()) return std::nullopt;
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      ::sched_yield();
    }
  } catch (const probe::ProbeError&) {
    return std::nullopt;  // ended, or not readable (a process that made itself non-dumpable)
  }
}

std::vector<pid_t> end_descendants(pid_t root) {
  std::vector<pid_t> signalled;
  try {
    std::set<pid_t> seen;
    for (int pass = 0; pass < kMaxPasses; ++pass) {
      const auto tree = descendants(root);
      std::set<pid_t> members(tree.begin(), tree.end());
      members.insert(root);
      bool fresh = false;
      for (pid_t pid : tree) {
        if (!seen.insert(pid).second) continue;
        fresh = true;
        const auto pidfd = pidfd_for(pid);
        if (!pidfd) continue;  // ended already
        // Read again once the pidfd holds it: a pid recycled since the pass is a stranger's.
        const auto links = links_of(pid);
        if (!links || !members.contains(links->parent)) continue;
        // A zombie (ended, its parent not yet told) is signalled harmlessly and not counted;
        // a group leader whose other threads run shows 'Z' too, and must be signalled.
        if (send_signal(pidfd, SIGKILL) && links->state != 'Z') signalled.push_back(pid);
      }
      if (!fresh) break;
    }
  } catch (const std::exception&) {
    // Out of memory mid-walk: what was signalled is ended; the group kill and the sweep after
    // the worker's end take the rest.
  }
  return signalled;
}

std::vector<pid_t> kill_tree(pid_t leader) {
  if (leader <= 0) return {};
  // Stopped, it forks no more while its tree is walked; SIGKILL ends it stopped or not.
  ::kill(leader, SIGSTOP);
  auto ended = end_descendants(leader);
  signal_group(leader, SIGKILL);
  return ended;
}

std::vector<pid_t> end_escaped(const std::string& tag) {
  std::vector<pid_t> ended;
  if (tag.empty()) return ended;
  const pid_t me = ::getpid();
  try {
    for_each_process([&](pid_t pid) {
      if (pid == me || pid == 1 || !owned_by_me(pid)) return;
      // Held before it is judged: the checks below then read the process the signal goes to,
      // or one that took its pid after it ended, which the pidfd then refuses.
      const auto pidfd = pidfd_for(pid);
      if (!pidfd) return;
      if (environment_host_tag(pid) != tag || !escaped_from(pid, me)) return;
      // It leads a group of its own (it called setsid): what it started there goes too. Its
      // group id cannot be reused while it lives, and the pidfd says it does.
      if (send_signal(pidfd, 0) && ::getpgid(pid) == pid) ::killpg(pid, SIGKILL);
      if (send_signal(pidfd, SIGKILL)) ended.push_back(pid);
    });
  } catch (const std::exception&) {
    // As in end_descendants.
  }
  return ended;
}

}  // namespace isohost::proc
