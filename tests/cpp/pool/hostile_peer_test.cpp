// Workers and zygotes that break the protocol on purpose (tests/fixtures/peers/fake_worker.py,
// given to the host as an environment's interpreter): each broken hello, reply or fork answer is
// a named error for its caller at once, never a wait for a timeout, and the host serves on.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "control/status_json.hpp"
#include "pool/pool.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using test_support::call_error;
using test_support::fixture_config;
using test_support::fixture_env;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

const std::string kFakeWorker = std::string(ISOHOST_FIXTURES_DIR) + "/peers/fake_worker.py";

EnvironmentConfig fake(const std::string& name, const std::string& mode) {
  EnvironmentConfig env;
  env.name = name;
  env.python = kFakeWorker;
  env.env["ISOHOST_FAKE"] = mode;
  return env;
}

// A config whose timeouts are far longer than any answer may take: a caller that gets a
// timeout instead of a ProtocolError fails the kind check, not a clock.
Config hostile_config(const std::vector<std::pair<std::string, std::string>>& modes) {
  auto config = fixture_config({"healthy"});
  config.host.start_timeout = std::chrono::seconds(60);
  config.host.call_timeout = std::chrono::seconds(60);
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const auto name = "fake" + std::to_string(i);
    config.environments[name] = fake(name, modes[i].first);
  }
  return config;
}

struct Answer {
  std::string mode;
  isohost::Error error;
  std::chrono::milliseconds took;
};

// Calls every fake environment at once; each call must fail.
std::vector<Answer> call_all(Pool& pool,
                             const std::vector<std::pair<std::string, std::string>>& modes) {
  std::vector<std::future<nlohmann::ordered_json>> calls;
  const auto began = Clock::now();
  for (std::size_t i = 0; i < modes.size(); ++i) {
    calls.push_back(pool.call("fake" + std::to_string(i), "m:f"));
  }
  std::vector<Answer> answers;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    auto error = call_error(std::move(calls[i]));
    answers.push_back(
        {modes[i].first, error,
         std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began)});
  }
  return answers;
}

void expect_protocol_errors(Pool& pool,
                            const std::vector<std::pair<std::string, std::string>>& modes) {
  std::chrono::milliseconds slowest{0};
  for (const auto& answer : call_all(pool, modes)) {
    EXPECT_EQ(answer.error.kind(), ErrorKind::protocol_error)
        << answer.mode << ": " << answer.error.what();
    const auto wanted =
        std::find_if(modes.begin(), modes.end(), [&](auto& m) { return m.first == answer.mode; });
    EXPECT_THAT(answer.error.what(), HasSubstr(wanted->second)) << answer.mode;
    slowest = std::max(slowest, answer.took);
  }
  // For the closing note of issue 13: every refusal arrives at once, not after a timeout.
  std::cout << modes.size() << " malformed peers answered with ProtocolError; slowest after "
            << slowest.count() << " ms\n";
  EXPECT_EQ(pool.call("healthy", "isohost_test_funcs:add", {1, 2}).get(), 3)
      << "the host serves on";
}

TEST(HostilePeer, HelloWithAnyFieldOfTheWrongTypeIsAProtocolError) {
  const std::vector<std::pair<std::string, std::string>> modes{
      {"hello:protocol=2.0", "'protocol' must be an integer, not a number with a fraction"},
      {"hello:protocol=\"2\"", "'protocol' must be an integer, not a string"},
      {"hello:protocol=null", "'protocol' must be an integer, not a null"},
      {"hello:protocol=3", "worker speaks protocol 3"},
      {"hello:pid=\"123\"", "'pid' must be an integer, not a string"},
      {"hello:pid=-4", "'pid' is -4"},
      {"hello:op=7", "first message was an integer, not hello"},
      {"hello:op=\"reply\"", "first message was 'reply', not hello"},
      {"hello:env=5", "'env' must be a string"},
      {"hello:capabilities=\"call\"", "'capabilities' must be an array of strings"},
      {"hello:torch=3", "'torch' must be a string or null"},
      {"first:{\"nothing\":1}", "hello has no 'op'"},
      {"side_first", "a frame on the side socket before hello"},
  };
  Pool pool(hostile_config(modes));
  expect_protocol_errors(pool, modes);
}

TEST(HostilePeer, ReplyWithAnyFieldOfTheWrongTypeIsAProtocolError) {
  const std::vector<std::pair<std::string, std::string>> modes{
      {"reply:ok=\"yes\"", "reply without a boolean 'ok'"},
      {"reply:ok=null", "reply without a boolean 'ok'"},
      {R"(reply_raw:{"op":"reply","id":ID,"ok":false,"error":"boom"})",
       "without an 'error' object"},
      {R"(reply_raw:{"op":"reply","id":ID,"ok":false,"error":{"type":5}})", "error.type is number"},
      {R"(reply_raw:{"op":"reply","id":ID,"ok":false,"error":{"message":[1]}})",
       "error.message is array"},
      {R"(reply_raw:{"op":"reply","id":ID,"ok":false,"error":{"where":{}}})",
       "error.where is object"},
      {R"(reply_raw:{"op":"reply","id":"ID","ok":true})", "reply without an integer id"},
      {R"(reply_raw:{"op":"reply","id":999999,"ok":true})", "reply to unknown request id 999999"},
      {R"(reply_raw:{"op":5,"id":ID,"ok":true})", "'op' is 5, not a string"},
      {R"(reply_raw:{"op":"dance","id":ID})", "unexpected message 'dance'"},
      {"deep_reply:1000000", "more than 256 levels deep"},
      {"unclaimed_fds:10000", "descriptors arrived that no frame announced"},
  };
  const int descriptors_before = test_support::open_descriptor_count();
  {
    Pool pool(hostile_config(modes));
    expect_protocol_errors(pool, modes);
  }
  EXPECT_EQ(test_support::open_descriptor_count(), descriptors_before)
      << "the fakes' descriptors are all closed";
}

TEST(HostilePeer, AWorkerThatClosesItsSideSocketMidCallIsNamed) {
  const std::vector<std::pair<std::string, std::string>> modes{
      {"close_side", "closed its side socket but did not exit"}};
  Pool pool(hostile_config(modes));
  expect_protocol_errors(pool, modes);
}

TEST(HostilePeer, PsAnswersWhileAWorkerHasNotSaidHello) {
  // Found by the chaos suite: ps read the hello of a starting worker (null) and threw on the
  // loop, so the ps was never answered.
  Pool pool(hostile_config({{"silent", ""}}));
  auto call = pool.call("fake0", "m:f");
  ASSERT_TRUE(test_support::eventually([&] {
    const auto workers = pool.status().get().workers;
    return !workers.empty() && workers[0].state == "starting";
  }));
  auto status = pool.status_with_memory();
  ASSERT_EQ(status.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "ps was never answered";
  const auto ps = control::status_json(status.get());
  EXPECT_TRUE(ps["workers"][0]["python"].is_null()) << ps.dump();
}

TEST(HostilePeer, AZygotesForkAnswerNamingAnotherProcessIsRefusedAndTheWorkerStartsFresh) {
  // A process of the host's that is no zygote's new child: what another environment's worker is.
  test_support::PausedChild victim;
  ::setenv("ISOHOST_FAKE_VICTIM", std::to_string(victim.pid).c_str(), 1);
  auto config = fixture_config({"healthy"});
  for (const std::string which : {"own", "env:ISOHOST_FAKE_VICTIM", "text"}) {
    auto env = fake("z-" + which.substr(0, 3), "zygote_pid:" + which);
    env.env["ISOHOST_FAKE_VICTIM"] = std::to_string(victim.pid);
    env.preload = {"anything"};
    config.environments[env.name] = env;
  }
  {
    Pool pool(config);
    for (const auto* env : {"z-own", "z-env", "z-tex"}) {
      EXPECT_EQ(pool.call(env, "m:f").get(), 1) << env << ": served by a worker started fresh";
    }
    for (const auto& w : pool.status().get().workers) {
      if (w.env.starts_with("z-")) {
        EXPECT_EQ(w.origin, std::string("spawn")) << w.env;
      }
    }
    EXPECT_TRUE(test_support::process_alive(victim.pid)) << "the process named in the answer lives";
  }
  EXPECT_TRUE(test_support::process_alive(victim.pid)) << "and outlives the host's shutdown";
}

}  // namespace
}  // namespace isohost::pool
