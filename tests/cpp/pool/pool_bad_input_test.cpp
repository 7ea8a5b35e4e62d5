// Bad input of every kind gets a clear, named error while the host keeps serving.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "pool/pool.hpp"
#include "support/test_support.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using isohost::test_support::call_error;
using isohost::test_support::fixture_config;

class PoolBadInput : public ::testing::Test {
 protected:
  // After each bad input, the healthy environment still answers.
  void TearDown() override {
    EXPECT_EQ(pool_->call("healthy", "isohost_test_funcs:add", {1, 2}).get(), 3);
    for (const auto& w : pool_->status().get().workers) {
      if (w.env == "healthy") {
        EXPECT_EQ(w.origin, isohost::test_support::expected_origin());
      }
    }
  }

  void make_pool(Config config) {
    config.environments["healthy"] = isohost::test_support::fixture_env("healthy");
    pool_ = std::make_unique<Pool>(std::move(config));
  }
  Pool& pool() { return *pool_; }

 private:
  std::unique_ptr<Pool> pool_;
};

TEST_F(PoolBadInput, GarbageOnTheProtocolDescriptorIsAProtocolError) {
  make_pool(fixture_config({"a"}));
  const auto error = call_error(pool().call("a", "isohost_test_funcs:write_garbage"));
  EXPECT_EQ(error.kind(), ErrorKind::protocol_error);
  EXPECT_THAT(error.what(), HasSubstr("bad frame magic"));
  EXPECT_EQ(pool().call("a", "isohost_test_funcs:add", {2, 2}).get(), 4) << "replaced";
}

TEST_F(PoolBadInput, MissingInterpreterIsASpawnError) {
  auto config = fixture_config({"a"});
  config.environments["a"].python = "/no/such/python3";
  make_pool(config);
  const auto error = call_error(pool().call("a", "isohost_test_funcs:add", {1, 2}));
  EXPECT_EQ(error.kind(), ErrorKind::spawn_failed);
  EXPECT_THAT(error.what(), HasSubstr("exec /no/such/python3: No such file or directory"));
}

TEST_F(PoolBadInput, InterpreterNotOnPathIsASpawnError) {
  auto config = fixture_config({"a"});
  config.environments["a"].python = "python-that-does-not-exist";
  make_pool(config);
  const auto error = call_error(pool().call("a", "isohost_test_funcs:add", {1, 2}));
  EXPECT_EQ(error.kind(), ErrorKind::spawn_failed);
  EXPECT_THAT(error.what(), HasSubstr("not found on PATH"));
}

TEST_F(PoolBadInput, MissingModuleOrFunctionIsTargetNotFound) {
  make_pool(fixture_config({"a"}));
  auto error = call_error(pool().call("a", "no_such_module:f"));
  EXPECT_EQ(error.kind(), ErrorKind::target_not_found);
  EXPECT_THAT(error.what(), HasSubstr("No module named 'no_such_module'"));
  error = call_error(pool().call("a", "isohost_test_funcs:no_such_function"));
  EXPECT_EQ(error.kind(), ErrorKind::target_not_found);
  EXPECT_THAT(error.what(), HasSubstr("no_such_function"));
}

TEST_F(PoolBadInput, RaisingFunctionIsAWorkerExceptionWithItsTraceback) {
  make_pool(fixture_config({"a"}));
  const pid_t pid = pool().call("a", "isohost_test_funcs:pid").get();
  const auto error = call_error(pool().call("a", "isohost_test_funcs:raises", {"boom"}));
  EXPECT_EQ(error.kind(), ErrorKind::worker_exception);
  EXPECT_THAT(error.what(), HasSubstr("ValueError: boom"));
  EXPECT_EQ(error.detail()["type"], "ValueError");
  EXPECT_THAT(error.detail()["traceback"].get<std::string>(), HasSubstr("Traceback"));
  EXPECT_EQ(pool().call("a", "isohost_test_funcs:pid").get(), pid) << "the worker lives on";
}

TEST_F(PoolBadInput, MalformedTargetAndArgumentsAreBadRequests) {
  make_pool(fixture_config({"a"}));
  EXPECT_EQ(call_error(pool().call("a", "no-colon")).kind(), ErrorKind::bad_request);
  EXPECT_EQ(call_error(pool().submit(Request{Request::Kind::call, "a",
                                             {{"target", "m:f"}, {"args", 3}, {"kwargs", {}}}}))
                .kind(),
            ErrorKind::bad_request);
  EXPECT_EQ(call_error(pool().call("nope", "m:f")).kind(), ErrorKind::unknown_environment);
}

// Each field a request's handling reads is checked first: a target of 5 was once read as a
// string on the loop thread, which threw there and left its caller waiting forever.
TEST_F(PoolBadInput, FieldsOfTheWrongTypeAreBadRequestsNamingTheValue) {
  using Json = nlohmann::ordered_json;
  make_pool(fixture_config({"a"}));
  const auto call = [](Json target, Json args = Json::array(), Json kwargs = Json::object()) {
    return Json{
        {"target", std::move(target)}, {"args", std::move(args)}, {"kwargs", std::move(kwargs)}};
  };
  auto with = [](Json message, const char* key, Json value) {
    message[key] = std::move(value);
    return message;
  };
  const std::pair<Json, std::string> cases[] = {
      {call(5), "target must be a string 'module:function', not 5"},
      {call(nullptr), "target must be a string 'module:function', not null"},
      {call(Json::array({"m", "f"})),
       "target must be a string 'module:function', not [\"m\",\"f\"]"},
      {Json{{"args", Json::array()}, {"kwargs", Json::object()}},
       "target must be a string 'module:function', not null"},
      {call("no-colon"), "target 'no-colon' is not of the form module:function"},
      {call("m:f", 3), "args must be a JSON array, not 3"},
      {call("m:f", Json::array(), Json::array()), "kwargs must be a JSON object, not []"},
      {with(call("m:f"), "pickle", 5), "pickle must be a JSON object, not 5"},
      {with(call("m:f"), "accept", true), "accept must be a string, not true"},
      {Json(5), "a request's message must be a JSON object, not 5"},
  };
  for (const auto& [message, says] : cases) {
    const auto error = call_error(pool().submit(Request{Request::Kind::call, "a", message}));
    EXPECT_EQ(error.kind(), ErrorKind::bad_request) << message.dump();
    EXPECT_EQ(std::string(error.what()), says);
  }
  const auto query = call_error(pool().submit(Request{Request::Kind::query, "a", {{"op", 5}}}));
  EXPECT_EQ(query.kind(), ErrorKind::bad_request);
  EXPECT_EQ(std::string(query.what()), "a query's op must be a string, not 5");
  const auto room = call_error(pool().submit(Request{Request::Kind::make_room, "", Json::array()}));
  EXPECT_EQ(std::string(room.what()), "a request's message must be a JSON object, not []");
  EXPECT_EQ(pool().call("a", "isohost_test_funcs:add", {2, 2}).get(), 4) << "serving on";
}

// Whatever else throws while a request is taken answers that request with the error, not the
// loop's catch-all: a make_room whose bytes hold no UTF-8 cannot even be shown.
TEST_F(PoolBadInput, ARequestThatThrowsIsAnsweredWithTheError) {
  make_pool(fixture_config({"a"}));
  const auto error = call_error(
      pool().submit(Request{Request::Kind::make_room, "", {{"bytes", std::string("\xff")}}}));
  EXPECT_EQ(error.kind(), ErrorKind::bad_request);
  EXPECT_THAT(error.what(), HasSubstr("the host could not take the request: "));
  EXPECT_THAT(error.what(), HasSubstr("invalid UTF-8"));
}

TEST_F(PoolBadInput, UnserialisableResultIsReported) {
  make_pool(fixture_config({"a"}));
  const auto error = call_error(pool().call("a", "isohost_test_funcs:not_json"));
  EXPECT_EQ(error.kind(), ErrorKind::worker_exception);
  EXPECT_EQ(error.detail()["where"], "result");
}

TEST_F(PoolBadInput, WorkerThatNeverSaysHelloTimesOut) {
  isohost::test_support::TempDir dir;
  const std::string silent = dir.path + "/silent-python";
  {
    std::ofstream script(silent);
    script << "#!/bin/sh\nexec sleep 60\n";
  }
  ::chmod(silent.c_str(), 0755);
  auto config = fixture_config({"a"});
  config.host.start_timeout = std::chrono::milliseconds(500);
  config.environments["a"].python = silent;  // runs, but never speaks the protocol
  make_pool(config);
  const auto error = call_error(pool().call("a", "m:f"));
  EXPECT_EQ(error.kind(), ErrorKind::start_timeout);
  EXPECT_THAT(error.what(), HasSubstr("did not say hello within 500 ms"));
}

}  // namespace
}  // namespace isohost::pool
