#pragma once

// Where the probe tests find their recorded /proc samples and the fake NVML library. Compile
// definitions set by the build; environment variables of the same names override them, so a
// built test still runs after being copied to another machine.

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace isohost::probe::testing {

inline std::string setting(const char* name, const char* built_in) {
  const char* from_environment = std::getenv(name);
  return from_environment != nullptr ? from_environment : built_in;
}

inline std::string fixtures_dir() {
#ifdef ISOHOST_FIXTURES_DIR
  return setting("ISOHOST_FIXTURES_DIR", ISOHOST_FIXTURES_DIR);
#else
  return setting("ISOHOST_FIXTURES_DIR", "tests/fixtures");
#endif
}

// The fake libnvidia-ml built from fake_nvml/; empty when this build has none.
inline std::string fake_nvml_path() {
#ifdef ISOHOST_FAKE_NVML_PATH
  return setting("ISOHOST_FAKE_NVML_PATH", ISOHOST_FAKE_NVML_PATH);
#else
  return setting("ISOHOST_FAKE_NVML_PATH", "");
#endif
}

inline std::string read_fixture(const std::string& name) {
  const std::string path = fixtures_dir() + "/probe/" + name;
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("missing fixture " + path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace isohost::probe::testing
