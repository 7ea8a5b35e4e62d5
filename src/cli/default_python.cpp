#include "cli/default_python.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include "proc/spawn.hpp"

namespace isohost::cli {
namespace {

bool has_torch(const std::string& python) {
  try {
    auto child = proc::spawn({.program = python,
                              .argv = {python, "-c",
                                       "import importlib.util, sys; "
                                       "sys.exit(0 if importlib.util.find_spec('torch') else 1)"},
                              .env = proc::scrubbed_environment({}),
                              .fds = {{0, 0}, {1, 1}, {2, 2}},
                              .new_process_group = false});
    int status = 0;
    ::waitpid(child.pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  } catch (const proc::SpawnError&) {
    return false;
  }
}

}  // namespace

std::string default_python() {
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (has_torch(candidate)) return candidate;
  }
  return "python3";
}

}  // namespace isohost::cli
