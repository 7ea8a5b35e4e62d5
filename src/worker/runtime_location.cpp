#include "worker/runtime_location.hpp"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "error/error.hpp"

#ifndef ISOHOST_SOURCE_PYTHON_DIR
#define ISOHOST_SOURCE_PYTHON_DIR ""
#endif

namespace isohost::worker {

std::string find_worker_runtime() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("ISOHOST_RUNTIME_DIR"); dir != nullptr && *dir != '\0') {
    candidates.emplace_back(dir);
  }
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / "python");
  candidates.emplace_back(ISOHOST_SOURCE_PYTHON_DIR);
  std::string tried;
  for (const auto& dir : candidates) {
    if (dir.empty()) continue;
    if (fs::exists(dir / "isohost_worker" / "__main__.py", ec)) return dir.string();
    tried += (tried.empty() ? "" : ", ") + dir.string();
  }
  throw Error(ErrorKind::spawn_failed,
              "cannot find the isohost_worker package (looked in " + tried +
                  "); set ISOHOST_RUNTIME_DIR to the directory that holds it");
}

}  // namespace isohost::worker
