// A call's asks reach its caller's handler and are answered from another thread; a call is
// interrupted in its worker, or its worker killed after the grace period (docs/protocol.md,
// "Asks" and "Interrupt"), with real Python workers.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "pool/pool.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using isohost::test_support::fixture_config;

// A call whose outcome and asks a test thread reads, answering each ask from that thread (as
// the Python API does) rather than from the loop.
struct AskingCall {
  std::mutex mutex;
  std::vector<std::pair<nlohmann::ordered_json, std::function<void(nlohmann::ordered_json)>>> asks;
  std::promise<Outcome> outcome;
  std::uint64_t ticket = 0;

  Request request(Pool& pool, const std::string& target, nlohmann::ordered_json args) {
    auto request = Request::call("a", target, std::move(args));
    ticket = request.ticket = pool.new_ticket();
    request.on_ask = [this](const nlohmann::ordered_json& ask,
                            std::function<void(nlohmann::ordered_json)> answer) {
      std::lock_guard lock(mutex);
      asks.emplace_back(ask, std::move(answer));
    };
    return request;
  }

  void submit(Pool& pool, const std::string& target, nlohmann::ordered_json args) {
    pool.submit(request(pool, target, std::move(args)),
                [this](Outcome o) { outcome.set_value(std::move(o)); });
  }

  // Waits for the next ask (polling the list: the loop thread fills it).
  std::pair<nlohmann::ordered_json, std::function<void(nlohmann::ordered_json)>> next_ask() {
    for (;;) {
      {
        std::lock_guard lock(mutex);
        if (!asks.empty()) {
          auto ask = std::move(asks.front());
          asks.erase(asks.begin());
          return ask;
        }
      }
      std::this_thread::yield();
    }
  }
};

TEST(PoolAsks, AnAskIsAnsweredFromTheCallersThread) {
  Pool pool(fixture_config({"a"}));
  AskingCall call;
  call.submit(pool, "isohost_test_funcs:ask_many", {"progress", 3});
  for (int i = 0; i < 3; ++i) {
    auto [ask, answer] = call.next_ask();
    EXPECT_EQ(ask["op"], "ask");
    EXPECT_EQ(ask["name"], "progress");
    EXPECT_EQ(ask["value"]["value"], i);
    answer({{"ok", true}, {"value", i * 10}});
    answer({{"ok", true}, {"value", -1}});  // a second answer does nothing
  }
  const auto outcome = call.outcome.get_future().get();
  ASSERT_TRUE(outcome.ok()) << outcome.error().what();
  EXPECT_EQ(outcome.value(), nlohmann::ordered_json({0, 10, 20}));
}

TEST(PoolAsks, AskingWithoutAHandlerIsUnsupported) {
  Pool pool(fixture_config({"a"}));
  EXPECT_EQ(
      pool.call("a", "isohost_test_funcs:ask_failure", {"anyone"}).get(),
      nlohmann::ordered_json(
          {"Unsupported", "the caller of call isohost_test_funcs:ask_failure serves no asks"}));
}

TEST(PoolAsks, TellsSentBetweenCallsGoToTheHostsOwnHandlerWithTheirEnvironment) {
  isohost::test_support::TempDir dir;
  const auto fifo = dir.path + "/go";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::mutex mutex;
  std::vector<std::pair<std::string, nlohmann::ordered_json>> told;
  std::promise<void> all_in;
  Pool pool(fixture_config({"a"}),
            PoolOptions{.on_tell = [&](const std::string& env, const nlohmann::ordered_json& tell) {
              std::lock_guard lock(mutex);
              told.emplace_back(env, tell);
              if (told.size() == 2) all_in.set_value();
            }});
  const nlohmann::ordered_json args = {fifo, "note", {1, 2}};
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:tell_after_call", args).get(), "later");
  std::ofstream(fifo) << "go\n";  // the call has returned: nothing is in flight now
  ASSERT_EQ(all_in.get_future().wait_for(60s), std::future_status::ready);
  std::lock_guard lock(mutex);
  ASSERT_EQ(told.size(), 2U);
  EXPECT_EQ(told[0].first, "a");
  EXPECT_EQ(told[0].second["op"], "tell");
  EXPECT_EQ(told[0].second["name"], "note");
  EXPECT_EQ(told[1].second["value"], 2);
}

// What the worker's thread told "asked" after asking `name` with 21 between calls.
nlohmann::ordered_json ask_between_calls(PoolOptions options, const std::string& name) {
  isohost::test_support::TempDir dir;
  const auto fifo = dir.path + "/go";
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::promise<nlohmann::ordered_json> asked;
  options.on_tell = [&](const std::string&, const nlohmann::ordered_json& tell) {
    if (tell["name"] == "asked") asked.set_value(tell["value"]);
  };
  Pool pool(fixture_config({"a"}), std::move(options));
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:ask_after_call", {fifo, name, 21}).get(), "later");
  std::ofstream(fifo) << "go\n";  // the call has returned: nothing is in flight now
  auto answer = asked.get_future();
  EXPECT_EQ(answer.wait_for(60s), std::future_status::ready);
  return answer.get();
}

TEST(PoolAsks, AsksSentBetweenCallsAreAnsweredByTheHostsOwnHandlerFromAnyThread) {
  std::vector<std::thread> answering;
  const auto asked = ask_between_calls(
      PoolOptions{.on_ask =
                      [&](const std::string& env, const nlohmann::ordered_json& ask,
                          std::function<void(nlohmann::ordered_json)> answer) {
                        EXPECT_EQ(env, "a");
                        EXPECT_EQ(ask["op"], "ask");
                        answering.emplace_back([ask, answer = std::move(answer)] {
                          answer({{"ok", true}, {"value", ask["value"].get<int>() * 2}});
                        });
                      }},
      "double");
  for (auto& thread : answering) thread.join();
  EXPECT_EQ(asked, nlohmann::ordered_json({{"answer", 42}}));
}

TEST(PoolAsks, AnAskBetweenCallsWithoutAHandlerIsAnsweredUnsupported) {
  EXPECT_EQ(ask_between_calls(PoolOptions{}, "double"),
            nlohmann::ordered_json(
                {{"error",
                  {"Unsupported",
                   "no call is in flight to ask, and this host serves no asks between calls"}}}));
}

TEST(PoolAsks, AnInterruptRaisesInTheCallAndTheWorkerServesOn) {
  Pool pool(fixture_config({"a"}));
  const auto pid = pool.call("a", "isohost_test_funcs:pid").get();
  AskingCall call;
  call.submit(pool, "isohost_test_funcs:spin_until_interrupted", {60});
  EXPECT_EQ(call.next_ask().first["name"], "started");
  pool.interrupt(call.ticket, 30s);
  const auto outcome = call.outcome.get_future().get();
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().kind(), ErrorKind::worker_exception);
  EXPECT_EQ(outcome.error().detail()["type"], "isohost_worker.interrupts.Interrupted");
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:pid").get(), pid);
}

TEST(PoolAsks, AWorkerStuckInCIsKilledAfterTheGraceAndReplacedWithoutBackoff) {
  Pool pool(fixture_config({"a"}));
  for (int round = 0; round < 4; ++round) {
    AskingCall call;
    call.submit(pool, "isohost_test_funcs:stuck_in_c", {60});
    EXPECT_EQ(call.next_ask().first["name"], "started");
    pool.interrupt(call.ticket, 100ms);
    const auto outcome = call.outcome.get_future().get();
    ASSERT_FALSE(outcome.ok());
    EXPECT_EQ(outcome.error().kind(), ErrorKind::interrupted);
    EXPECT_THAT(outcome.error().what(), HasSubstr("did not stop within 0.1 s of its interrupt"));
  }
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {1, 2}).get(), 3);
}

TEST(PoolAsks, AQueuedCallInterruptedFailsAtOnce) {
  Pool pool(fixture_config({"a"}));
  AskingCall running;
  running.submit(pool, "isohost_test_funcs:spin_until_interrupted", {60});
  EXPECT_EQ(running.next_ask().first["name"], "started");
  AskingCall queued;
  queued.submit(pool, "isohost_test_funcs:add", {1, 1});
  pool.interrupt(queued.ticket, 1s);
  const auto outcome = queued.outcome.get_future().get();
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().kind(), ErrorKind::interrupted);
  pool.interrupt(running.ticket, 30s);
  EXPECT_FALSE(running.outcome.get_future().get().ok());
  pool.interrupt(running.ticket, 1ms);  // ended: nothing happens
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:add", {2, 2}).get(), 4);
}

}  // namespace
}  // namespace isohost::pool
