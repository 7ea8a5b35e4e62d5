#include "pool/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/error.hpp"

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
      {"[host]\ncall_timeout_second = 3\n", "t.toml:2:23: unknown key 'call_timeout_second' in [host]"},
      {"[host]\ncall_timeout_seconds = \"soon\"\n", "must be a number of seconds"},
      {"[host]\nidle_reap_seconds = -1\n", "between 0 and"},
      {"[env.a]\npython = 3\n", "'python' must be a string"},
      {"[host]\nram_budget_mb = 1.5\n", "'ram_budget_mb' must be a whole number of MB"},
      {"[env.a]\npath = \"/x\"\n", "'path' must be a list"},
      {"[env.a]\nenv = { A = 1 }\n", "'env.A' must be a string"},
      {"[env.a]\nsurprise = true\n", "unknown key 'surprise' in [env.a]"},
      {"env = 3\n", "[env] must hold"},
      {"color = 3\n", "unknown key 'color' in [top level]"},
  };
  for (const auto& c : cases) {
    try {
      parse_config(c.text, "t.toml", "/base");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const worker::Error& e) {
      EXPECT_EQ(e.kind(), worker::ErrorKind::config_error);
      EXPECT_THAT(e.what(), HasSubstr(c.says)) << c.text;
    }
  }
}

TEST(Config, MissingFileIsAConfigError) {
  try {
    load_config("/no/such/isohost.toml");
    ADD_FAILURE();
  } catch (const worker::Error& e) {
    EXPECT_EQ(e.kind(), worker::ErrorKind::config_error);
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
           {"[env.a]\nhibernate = \"no\"\n", "t.toml:2:13: 'hibernate' must be true or false"},
           {"[host]\nidle_hibernate_seconds = -1\n", "'idle_hibernate_seconds' must be between 0 and 1e9 seconds"},
           {"[host]\nhibernate = true\n", "unknown key 'hibernate' in [host]"}}) {
    try {
      parse_config(text, "t.toml", "/base");
      ADD_FAILURE() << text;
    } catch (const worker::Error& e) {
      EXPECT_EQ(e.kind(), worker::ErrorKind::config_error);
      EXPECT_THAT(e.what(), ::testing::HasSubstr(message));
    }
  }
}

TEST(Config, WorkerPollWindow) {
  EXPECT_EQ(parse_config("", "t.toml", "/base").host.worker_poll, std::chrono::microseconds(100));
  EXPECT_EQ(parse_config("[host]\nworker_poll_microseconds = 0\n", "t.toml", "/base").host.worker_poll,
            std::chrono::microseconds(0));
  for (const auto* text : {"[host]\nworker_poll_microseconds = -1\n", "[host]\nworker_poll_microseconds = 1.5\n",
                           "[host]\nworker_poll_microseconds = 1000001\n"}) {
    try {
      parse_config(text, "t.toml", "/base");
      ADD_FAILURE() << text;
    } catch (const worker::Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(
                                "t.toml:2:28: 'worker_poll_microseconds' must be a whole number from 0 to 1000000"));
    }
  }
}

}  // namespace
}  // namespace isohost::pool
