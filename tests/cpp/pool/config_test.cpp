#include "pool/config.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "error/error.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(Config, EverySettingHasADefault) {
  const auto config = parse_config("", "empty.toml", "/base");
  EXPECT_EQ(config.host.call_timeout, 600s);
  EXPECT_EQ(config.host.idle_release, 60s);
  EXPECT_EQ(config.host.idle_reap, 1800s);
  EXPECT_TRUE(config.environments.empty());
}

TEST(Config, ReadsHostAndEnvironments) {
  const auto config = parse_config(R"(
[host]
call_timeout_seconds = 2.5
idle_release_seconds = 30
idle_reap_seconds = 0
ram_budget_mb = 4000
ram_floor_mb = 500
[env.vision]
python = "envs/vision/bin/python"
path = ["packs/vision", "/abs/dir"]
cwd = "work"
env = { CUDA_MODULE_LOADING = "LAZY" }
call_timeout_seconds = 10
[env.plain]
)",
                                   "t.toml", "/base");
  EXPECT_EQ(config.host.call_timeout, 2500ms);
  EXPECT_EQ(config.host.idle_release, 30s);
  EXPECT_EQ(config.host.ram_budget, 4'000'000'000U);
  EXPECT_EQ(config.host.ram_floor, 500'000'000U);
  EXPECT_EQ(config.host.idle_reap, 0ms);
  const auto& vision = config.environments.at("vision");
  EXPECT_EQ(vision.python, "/base/envs/vision/bin/python");
  EXPECT_THAT(vision.path, ::testing::ElementsAre("/base/packs/vision", "/abs/dir"));
  EXPECT_EQ(vision.cwd, "/base/work");
  EXPECT_EQ(vision.env.at("CUDA_MODULE_LOADING"), "LAZY");
  EXPECT_EQ(vision.call_timeout, 10s);
  EXPECT_EQ(config.environments.at("plain").python, "python3") << "bare names stay for PATH";
}

TEST(Config, BadFilesAreNamedErrorsWithAPlace) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"[host\n", "t.toml:1:"},
      {"[host]\ncall_timeout_second = 3\n",
       "t.toml:2:23: unknown key 'call_timeout_second' in [host]"},
      {"[host]\ncall_timeout_seconds = \"soon\"\n",
       "t.toml:2:24: [host] 'call_timeout_seconds' must be a number of seconds, not 'soon'"},
      {"[host]\nidle_reap_seconds = -1\n", "between 0 and"},
      {"[env.a]\npython = 3\n", "t.toml:2:10: [env.a] 'python' must be a string, not 3"},
      {"[host]\nram_budget_mb = 1.5\n", "'ram_budget_mb' must be a whole number of MB"},
      {"[env.a]\npath = \"/x\"\n", "[env.a] 'path' must be a list of directories, not '/x'"},
      {"[env.a]\nenv = { A = 1 }\n", "[env.a] 'env.A' must be a string, not 1"},
      {"[env.a]\nsurprise = true\n",
       "unknown key 'surprise' in [env.a] (known: call_timeout_seconds, cwd, device, env, "},
      {"env = 3\n", "[env] must hold"},
      {"color = 3\n", "unknown key 'color' in [top level]"},
  };
  for (const auto& c : cases) {
    try {
      parse_config(c.text, "t.toml", "/base");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const isohost::Error& e) {
      EXPECT_EQ(e.kind(), isohost::ErrorKind::config_error);
      EXPECT_THAT(e.what(), HasSubstr(c.says)) << c.text;
    }
  }
}

TEST(Config, MissingFileIsAConfigError) {
  try {
    load_config("/no/such/isohost.toml");
    ADD_FAILURE();
  } catch (const isohost::Error& e) {
    EXPECT_EQ(e.kind(), isohost::ErrorKind::config_error);
    EXPECT_THAT(e.what(), HasSubstr("/no/such/isohost.toml"));
  }
}

}  // namespace
}  // namespace isohost::pool

namespace isohost::pool {
namespace {

TEST(Config, HibernationSettings) {
  const auto defaults = parse_config("[env.a]\n", "t.toml", "/base");
  EXPECT_EQ(defaults.host.idle_hibernate, std::chrono::milliseconds(0)) << "off unless asked for";
  EXPECT_TRUE(defaults.environments.at("a").hibernate);
  const auto config = parse_config("[host]\nidle_hibernate_seconds = 120\n[env.a]\nhibernate = false\n[env.b]\n"
                                   "hibernate = true\n",
                                   "t.toml", "/base");
  EXPECT_EQ(config.host.idle_hibernate, std::chrono::seconds(120));
  EXPECT_FALSE(config.environments.at("a").hibernate);
  EXPECT_TRUE(config.environments.at("b").hibernate);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"[env.a]\nhibernate = \"no\"\n",
            "t.toml:2:13: [env.a] 'hibernate' must be true or false, not 'no'"},
           {"[host]\nidle_hibernate_seconds = -1\n",
            "'idle_hibernate_seconds' must be between 0 and 31536000 seconds (a year), not -1"},
           {"[host]\nhibernate = true\n", "unknown key 'hibernate' in [host]"}}) {
    try {
      parse_config(text, "t.toml", "/base");
      ADD_FAILURE() << text;
    } catch (const isohost::Error& e) {
      EXPECT_EQ(e.kind(), isohost::ErrorKind::config_error);
      EXPECT_THAT(e.what(), ::testing::HasSubstr(message));
    }
  }
}

TEST(Config, PollWindows) {
  const auto defaults = parse_config("", "t.toml", "/base").host;
  EXPECT_EQ(defaults.worker_poll, std::chrono::microseconds(100));
  EXPECT_EQ(defaults.loop_poll_after_call, std::chrono::microseconds(0));
  const auto set = parse_config("[host]\nworker_poll_microseconds = 0\nloop_poll_after_call_microseconds = 2000\n",
                                "t.toml", "/base")
                       .host;
  EXPECT_EQ(set.worker_poll, std::chrono::microseconds(0));
  EXPECT_EQ(set.loop_poll_after_call, std::chrono::microseconds(2000));
  for (const std::string key : {"worker_poll_microseconds", "loop_poll_after_call_microseconds"}) {
    for (const std::string value : {"-1", "1.5", "1000001", "'100'"}) {
      const auto text = "[host]\n" + key + " = " + value + "\n";
      try {
        parse_config(text, "t.toml", "/base");
        ADD_FAILURE() << text;
      } catch (const isohost::Error& e) {
        EXPECT_THAT(
            e.what(),
            ::testing::HasSubstr("t.toml:2:" + std::to_string(key.size() + 4) + ": [host] '" + key +
                                 "' must be a whole number from 0 to 1000000, not " + value));
      }
    }
  }
}

}  // namespace
}  // namespace isohost::pool

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;

// The config_error parse_config throws for `text`, or a failure naming what was accepted.
std::string refusal(const std::string& text) {
  try {
    parse_config(text, "t.toml", "/base");
  } catch (const isohost::Error& e) {
    EXPECT_EQ(e.kind(), isohost::ErrorKind::config_error) << text;
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

const char* const kHostSecondsKeys[] = {
    "call_timeout_seconds",   "start_timeout_seconds",  "idle_release_seconds",
    "idle_reap_seconds",      "shutdown_grace_seconds", "admission_wait_seconds",
    "grant_lifetime_seconds", "idle_hibernate_seconds", "idle_sleep_seconds"};

TEST(Config, EverySecondsKeyRefusesNanInfNegativeAndOverAYear) {
  // 1e300 s overflowed the conversion to milliseconds; a year and a second overflows nothing
  // but is past the documented limit; 1e-5 s would become 0, which means never.
  const char* const values[] = {"nan", "+nan", "-nan",  "inf",      "-inf",
                                "-1",  "-0.5", "1e300", "31536001", "9223372036854775807",
                                "1e-5"};
  std::vector<std::string> texts;
  for (const auto* key : kHostSecondsKeys) {
    for (const auto* value : values) {
      texts.push_back(std::string("[host]\n") + key + " = " + value + "\n");
    }
  }
  for (const auto* value : values) {
    texts.push_back(std::string("[env.a]\ncall_timeout_seconds = ") + value + "\n");
  }
  for (const auto& text : texts) {
    const auto key = text.substr(text.find('\n') + 1, text.find(" = ") - text.find('\n') - 1);
    const auto value = text.substr(text.find(" = ") + 3, text.size() - text.find(" = ") - 4);
    const auto message = refusal(text);
    EXPECT_THAT(message, HasSubstr("t.toml:2:")) << text;
    const auto section = text.substr(0, text.find('\n'));  // [host] or [env.a]
    EXPECT_THAT(message, HasSubstr(section + " '" + key + "' must be")) << text;
    // The value as the file wrote it (toml++ prints 1e300 as 1e+300 and +nan as nan).
    if (value == "nan" || value == "inf" || value == "-1") {
      EXPECT_THAT(message, HasSubstr("not " + value)) << text;
    }
  }
}

TEST(Config, SecondsUpToAYearAreTaken) {
  std::string text = "[host]\n";
  for (const auto* key : kHostSecondsKeys) text += std::string(key) + " = 31536000\n";
  text += "[env.a]\ncall_timeout_seconds = 0.001\n";
  const auto config = parse_config(text, "t.toml", "/base");
  const std::chrono::milliseconds year = std::chrono::hours(24 * 365);
  EXPECT_EQ(config.host.call_timeout, year);
  EXPECT_EQ(config.host.start_timeout, year);
  EXPECT_EQ(config.host.idle_release, year);
  EXPECT_EQ(config.host.idle_reap, year);
  EXPECT_EQ(config.host.shutdown_grace, year);
  EXPECT_EQ(config.host.admission_wait, year);
  EXPECT_EQ(config.host.grant_lifetime, year);
  EXPECT_EQ(config.host.idle_hibernate, year);
  EXPECT_EQ(config.host.idle_sleep, year);
  EXPECT_EQ(config.environments.at("a").call_timeout, std::chrono::milliseconds(1));
}

TEST(Config, ByteSizedKeysRefuseValuesThatWouldWrap) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      // 18446744073710 MB is 2^64 + 384000 bytes: it wrapped to a 0.4 MB budget.
      {"[host]\nram_budget_mb = 18446744073710\n",
       "t.toml:2:17: [host] 'ram_budget_mb' must be a whole number of MB from 0 to 1000000000000 "
       "(an "
       "exabyte), not 18446744073710"},
      {"[host]\nram_floor_mb = 18446744073710\n", "'ram_floor_mb' must be a whole number of MB"},
      {"[host]\nram_budget_mb = 9223372036854775807\n", "'ram_budget_mb' must be"},
      {"[host]\nram_floor_mb = 1000000000001\n", "not 1000000000001"},
      {"[host]\nram_budget_mb = -1\n", "'ram_budget_mb' must be"},
      // 2^44 MiB is 2^64 bytes: it wrapped to 0.
      {"[host]\nvram_reserve_mib = 17592186044416\n",
       "t.toml:2:20: [host] 'vram_reserve_mib' must be a whole number of MiB from 0 to "
       "1099511627776 (an "
       "exbibyte), not 17592186044416"},
      {"[host]\nvram_reserve_mib = 9223372036854775807\n", "'vram_reserve_mib' must be"},
      {"[host]\nvram_reserve_mib = 1099511627777\n", "'vram_reserve_mib' must be"},
      {"[host]\nvram_reserve_mib = -1\n", "'vram_reserve_mib' must be"},
  };
  for (const auto& c : cases) EXPECT_THAT(refusal(c.text), HasSubstr(c.says)) << c.text;
  const auto config = parse_config(
      "[host]\nram_budget_mb = 1000000000000\nram_floor_mb = 1000000000000\n"
      "vram_reserve_mib = 1099511627776\n",
      "t.toml", "/base");
  EXPECT_EQ(config.host.ram_budget, 1'000'000'000'000'000'000U);
  EXPECT_EQ(config.host.ram_floor, 1'000'000'000'000'000'000U);
  EXPECT_EQ(config.host.vram_reserve, std::uint64_t{1} << 60);
}

// A wrong type names the table and the value, as a range error does: a Python dict
// configuration's line and column point into TOML its caller never wrote.
TEST(Config, TypeErrorsNameTheTableAndTheValue) {
  const std::pair<const char*, const char*> cases[] = {
      {"[host]\ncall_timeout_seconds = \"5s\"\n",
       "t.toml:2:24: [host] 'call_timeout_seconds' must be a number of seconds, not '5s'"},
      {"[host]\nsimulated_gpu = 1\n", "[host] 'simulated_gpu' must be a string, not 1"},
      {"[host]\nworker_poll_microseconds = true\n",
       "[host] 'worker_poll_microseconds' must be a whole number from 0 to 1000000, not true"},
      {"[host]\nram_floor_mb = \"1\"\n", "[host] 'ram_floor_mb' must be a whole number of MB"},
      {"[env.b]\npython = 5\n", "t.toml:2:10: [env.b] 'python' must be a string, not 5"},
      {"[env.b]\ncwd = [\"/x\"]\n", "[env.b] 'cwd' must be a string, not [ '/x' ]"},
      {"[env.b]\npath = [\"/x\", 2]\n", "[env.b] 'path' must be a string, not 2"},
      {"[env.b]\nenv = 3\n", "[env.b] 'env' must be a table of variables, not 3"},
      {"[env.b]\ncall_timeout_seconds = \"x\"\n",
       "[env.b] 'call_timeout_seconds' must be a number of seconds, not 'x'"},
      {"[env.b]\ncall_timeout_seconds = -1\n",
       "[env.b] 'call_timeout_seconds' must be between 0 and 31536000 seconds (a year), not -1"},
      {"[env.b]\ndevice = 256\n", "[env.b] 'device' must be a GPU index from 0 to 255, not 256"},
      {"[env.b]\ndevice = \"0\"\n", "[env.b] 'device' must be a GPU index from 0 to 255, not '0'"},
      {"[env.b]\npreload = [1]\n", "[env.b] 'preload' must be a string, not 1"},
      {"host = 3\n", "t.toml:1:8: [host] must be a table, not 3"},
      {"env = 3\n", "[env] must hold [env.NAME] tables, not 3"},
      {"[env]\nb = \"x\"\n", "t.toml:2:5: [env.b] must be a table, not 'x'"},
  };
  for (const auto& [text, says] : cases) EXPECT_THAT(refusal(text), HasSubstr(says)) << text;
}

TEST(Config, NulInAnyStringIsRefusedNamingTheKey) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"[env.a]\npython = \"/opt/py\\u0000thon\"\n",
       "t.toml:2:10: [env.a] 'python' must not contain a NUL character, not "
       "\"/opt/py\\u0000thon\""},
      {"[env.a]\npath = [\"/ok\", \"/x\\u0000y\"]\n",
       "t.toml:2:16: [env.a] 'path' must not contain a NUL"},
      {"[env.a]\ncwd = \"/x\\u0000y\"\n", "'cwd' must not contain a NUL"},
      {"[env.a]\nenv = { A = \"x\\u0000y\" }\n", "'env.A' must not contain a NUL"},
      {"[env.a]\npreload = [\"nu\\u0000mpy\"]\n", "'preload' must not contain a NUL"},
      {"[host]\nsimulated_gpu = \"/x\\u0000y\"\n", "'simulated_gpu' must not contain a NUL"},
      {"[env.a]\nenv = { \"A\\u0000B\" = \"x\" }\n",
       "'env' variable name \"A\\u0000B\" must be non-empty, without '=' or a NUL character"},
      {"[env.a]\nenv = { \"A=B\" = \"x\" }\n", "'env' variable name 'A=B' must be"},
      {"[env.a]\nenv = { \"\" = \"x\" }\n", "'env' variable name '' must be"},
      {"[env.\"a\\u0000b\"]\n", "environment name \"a\\u0000b\" must not contain a NUL"},
  };
  for (const auto& c : cases) EXPECT_THAT(refusal(c.text), HasSubstr(c.says)) << c.text;
}

// The config_error load_config throws for `path`, or a failure naming what was accepted.
std::string load_refusal(const std::string& path) {
  try {
    load_config(path);
  } catch (const isohost::Error& e) {
    EXPECT_EQ(e.kind(), isohost::ErrorKind::config_error) << path;
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << path;
  return "";
}

TEST(Config, LoadNamesAMissingFileOrADirectory) {
  test_support::TempDir dir;
  EXPECT_EQ(load_refusal(dir.path + "/missing.toml"),
            "configuration file '" + dir.path + "/missing.toml': no such file");
  EXPECT_EQ(load_refusal(dir.path), "configuration file '" + dir.path + "': is a directory");
}

TEST(Config, LoadRefusesAFifoWithoutWaitingForAWriter) {
  test_support::TempDir dir;
  const auto fifo = dir.path + "/isohost.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto loading = std::async(std::launch::async, [&] { return load_refusal(fifo); });
  if (loading.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "load_config waits on a FIFO";
    // Open and close the write end so that the blocked reader sees end-of-file and returns.
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  EXPECT_EQ(loading.get(), "configuration file '" + fifo + "': is a FIFO, not a regular file");
}

TEST(Config, LoadRefusesADevice) {
  EXPECT_EQ(load_refusal("/dev/zero"),
            "configuration file '/dev/zero': is a character device, not a regular file");
}

TEST(Config, LoadRefusesAFileOverOneMebibyte) {
  test_support::TempDir dir;
  const auto path = dir.path + "/isohost.toml";
  {
    std::ofstream file(path);
    file << "[host]\n" << std::string((1 << 20) - 7, '#') << "\n";
  }
  ASSERT_EQ(std::filesystem::file_size(path), (1U << 20) + 1);
  EXPECT_EQ(load_refusal(path), "configuration file '" + path +
                                    "': is 1048577 bytes, over the limit of 1 MiB for a "
                                    "configuration");
  std::filesystem::resize_file(path, 1U << 20);  // a comment of exactly the limit is read
  EXPECT_EQ(load_config(path).source, path);
}

TEST(Config, LoadResolvesRelativePathsAgainstTheFile) {
  test_support::TempDir dir;
  const auto path = dir.path + "/isohost.toml";
  std::ofstream(path) << "[env.a]\npython = \"envs/a/bin/python\"\ncwd = \"work\"\n";
  const auto config = load_config(path);
  EXPECT_EQ(config.source, path);
  EXPECT_EQ(config.environments.at("a").python, dir.path + "/envs/a/bin/python");
  EXPECT_EQ(config.environments.at("a").cwd, dir.path + "/work");
}

}  // namespace
}  // namespace isohost::pool
