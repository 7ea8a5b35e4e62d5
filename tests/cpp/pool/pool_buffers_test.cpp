// The core forwards a pickled value's memfds without touching them: a request's to the worker,
// a reply's back to the caller, and closes those nobody takes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "pool/pool.hpp"
#include "support/test_support.hpp"
#include "wire/memfd.hpp"

namespace isohost::pool {
namespace {

using ::testing::HasSubstr;
using namespace isohost::test_support;

constexpr std::size_t kSize = 3u << 20;

// pickle.dumps(((persistent id ("isohost", 0, "bytes", "B", None),), {}), protocol=5): the
// arguments (one bytes object, buffer 0 of the value) as python/isohost_worker/values.py
// writes them.
constexpr const char* kOneBytesArgument =
    "gAWVJAAAAAAAAAAojAdpc29ob3N0lEsAjAVieXRlc5SMAUKUTnSUUYWUfZSGlC4=";

nlohmann::ordered_json one_buffer_value(std::size_t announced_size) {
  return {{"stream", {{"kind", "inline"}, {"data", kOneBytesArgument}}},
          {"buffers", nlohmann::ordered_json::array(
                          {{{"kind", "memfd"}, {"size", announced_size}, {"readonly", true}}})}};
}

// A sealed memfd of kSize bytes, byte i holding i % 251.
wire::UniqueFd patterned_memfd() {
  auto fd = wire::create_memfd("pool-buffers-test", kSize);
  auto mapping = wire::MappedBuffer::map(fd.get(), wire::MappedBuffer::Access::read_write);
  auto bytes = mapping.bytes();
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i % 251);
  return fd;
}

std::uint64_t pattern_sum() {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < kSize; ++i) sum += i % 251;
  return sum;
}

Request pickled_call(const std::string& target, nlohmann::ordered_json value,
                     std::vector<wire::UniqueFd> fds) {
  auto request = Request::call("a", target);
  request.message["pickle"] = std::move(value);
  request.buffers = wire::SharedFds(std::move(fds));
  return request;
}

// Whether this process still holds a descriptor of the file `identity` (st_dev, st_ino) names:
// precise where a count of descriptors is not, since the pool's own threads open and close
// files (its /proc readings) at any moment.
bool holds_file(std::pair<dev_t, ino_t> identity) {
  for (const auto& entry : directory_entries("/proc/self/fd")) {
    struct stat st {};
    if (::stat(("/proc/self/fd/" + entry).c_str(), &st) == 0 &&
        std::pair{st.st_dev, st.st_ino} == identity) {
      return true;
    }
  }
  return false;
}

std::pair<dev_t, ino_t> identity_of(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0) << std::strerror(errno);
  return {st.st_dev, st.st_ino};
}

Outcome outcome_of(Pool& pool, Request request) {
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto future = promise->get_future();
  pool.submit(std::move(request),
              [promise](Outcome outcome) { promise->set_value(std::move(outcome)); });
  return future.get();
}

TEST(PoolBuffers, ARequestsMemfdReachesTheWorkerIntact) {
  Pool pool(fixture_config({"a"}));
  ASSERT_EQ(pool.call("a", "isohost_test_funcs:add", {1, 1}).get(), 2);  // started
  std::vector<wire::UniqueFd> fds;
  fds.push_back(patterned_memfd());
  const auto memfd = identity_of(fds.back().get());
  const auto outcome = outcome_of(
      pool, pickled_call("isohost_value_funcs:checksum", one_buffer_value(kSize), std::move(fds)));
  ASSERT_TRUE(outcome.ok()) << outcome.error().what();
  EXPECT_EQ(outcome.value(), nlohmann::ordered_json::array({kSize, pattern_sum()}));
  EXPECT_FALSE(holds_file(memfd)) << "the host closed its copy once sent";
}

TEST(PoolBuffers, AReplysMemfdsReachTheCaller) {
  Pool pool(fixture_config({"a"}));
  auto request = Request::call("a", "isohost_value_funcs:make_bytes", {kSize, 7});
  request.message["accept"] = "pickle5";
  const auto outcome = outcome_of(pool, std::move(request));
  ASSERT_TRUE(outcome.ok()) << outcome.error().what();
  ASSERT_TRUE(outcome.pickle().is_object()) << outcome.value();
  ASSERT_EQ(outcome.pickle()["buffers"].size(), 1u);
  EXPECT_EQ(outcome.pickle()["buffers"][0]["size"], kSize);
  auto fds = outcome.buffers().take();
  ASSERT_GE(fds.size(), 1u);
  EXPECT_TRUE(outcome.buffers().take().empty()) << "taken once";
  ASSERT_EQ(wire::memfd_size(fds[0].get()), kSize);
  const auto mapping = wire::MappedBuffer::map(fds[0].get(), wire::MappedBuffer::Access::read_only);
  const auto bytes = mapping.bytes();
  EXPECT_TRUE(
      std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{7}; }));
}

TEST(PoolBuffers, ABufferAnnouncedButMissingIsADecodeErrorAndTheWorkerServesOn) {
  Pool pool(fixture_config({"a"}));
  const auto pid = pool.call("a", "isohost_test_funcs:pid").get();
  const auto missing =
      outcome_of(pool, pickled_call("isohost_value_funcs:checksum", one_buffer_value(kSize), {}));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind(), ErrorKind::decode_error);
  EXPECT_THAT(missing.error().what(), HasSubstr("announces 1 buffer(s) but 0 descriptor(s)"));
  std::vector<wire::UniqueFd> fds;
  fds.push_back(patterned_memfd());
  const auto mismatch = outcome_of(pool, pickled_call("isohost_value_funcs:checksum",
                                                      one_buffer_value(kSize + 1), std::move(fds)));
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.error().kind(), ErrorKind::decode_error);
  EXPECT_THAT(mismatch.error().what(), HasSubstr("is described as"));
  EXPECT_EQ(pool.call("a", "isohost_test_funcs:pid").get(), pid) << "the same worker";
}

TEST(PoolBuffers, BuffersOfARefusedRequestAreClosed) {
  Pool pool(fixture_config({"a"}));
  std::vector<wire::UniqueFd> fds;
  fds.push_back(patterned_memfd());
  const auto memfd = identity_of(fds.back().get());
  auto request =
      pickled_call("isohost_value_funcs:checksum", one_buffer_value(kSize), std::move(fds));
  request.env = "nope";
  const auto outcome = outcome_of(pool, std::move(request));
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().kind(), ErrorKind::unknown_environment);
  EXPECT_FALSE(holds_file(memfd)) << "the refused request's memfd is still open";
}

}  // namespace
}  // namespace isohost::pool
