#include "wire/frame.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "support/test_support.hpp"
#include "wire/json_depth.hpp"

namespace isohost::wire {
namespace {

std::vector<std::uint8_t> header(const char magic[4], std::uint16_t version, std::uint16_t flags,
                                 std::uint32_t json_length, std::uint32_t buffers) {
  std::vector<std::uint8_t> out(kHeaderSize);
  std::memcpy(out.data(), magic, 4);
  std::memcpy(out.data() + 4, &version, 2);  // the test machine is little-endian
  std::memcpy(out.data() + 6, &flags, 2);
  std::memcpy(out.data() + 8, &json_length, 4);
  std::memcpy(out.data() + 12, &buffers, 4);
  return out;
}

TEST(Frame, EncodesTheDocumentedLayout) {
  const auto bytes = encode_frame({{"op", "ping"}}, 2);
  ASSERT_EQ(bytes.size(), kHeaderSize + 13);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "ISOH");
  EXPECT_EQ(bytes[4], kProtocolVersion);
  EXPECT_EQ(bytes[5], 0);
  EXPECT_EQ(bytes[8], 13);
  EXPECT_EQ(bytes[12], 2);
  EXPECT_EQ(std::string(bytes.begin() + kHeaderSize, bytes.end()), R"({"op":"ping"})");
}

TEST(Frame, RoundTripsThroughTheReaderInAnySplit) {
  const nlohmann::ordered_json body{{"op", "call"}, {"args", {1, "two", nullptr, {{"x", 3.5}}}}};
  auto bytes = encode_frame(body);
  const auto second = encode_frame({{"op", "reply"}, {"id", 7}});
  bytes.insert(bytes.end(), second.begin(), second.end());
  for (std::size_t split = 0; split <= bytes.size(); ++split) {
    FrameReader reader;
    reader.append({bytes.data(), split});
    std::vector<nlohmann::ordered_json> got;
    while (auto f = reader.next()) got.push_back(f->body);
    reader.append({bytes.data() + split, bytes.size() - split});
    while (auto f = reader.next()) got.push_back(f->body);
    ASSERT_EQ(got.size(), 2U) << "split at " << split;
    EXPECT_EQ(got[0], body);
    EXPECT_EQ(got[1]["id"], 7);
    EXPECT_EQ(reader.buffered_bytes(), 0U);
  }
}

TEST(Frame, RejectsBadHeaders) {
  struct Case {
    std::vector<std::uint8_t> bytes;
    const char* says;
  };
  const Case cases[] = {
      {header("GARB", 1, 0, 2, 0), "bad frame magic 'GARB'"},
      {header("ISOH", 7, 0, 2, 0), "protocol version 7"},
      {header("ISOH", kProtocolVersion, 1, 2, 0), "unknown flags"},
      {header("ISOH", kProtocolVersion, 0, 0, 0), "JSON body of 0 bytes"},
      {header("ISOH", kProtocolVersion, 0, kMaxJsonLength + 1, 0), "allowed 1 to"},
      {header("ISOH", kProtocolVersion, 0, 2, kMaxBuffers + 1), "at most 64"},
  };
  for (const auto& c : cases) {
    FrameReader reader;
    reader.append(c.bytes);
    try {
      reader.next();
      ADD_FAILURE() << "accepted a header that should say: " << c.says;
    } catch (const WireError& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
    EXPECT_THROW(reader.next(), WireError) << "a failed stream stays failed";
  }
}

TEST(Frame, RejectsBodiesThatAreNotJsonObjects) {
  for (const std::string body : {"[1,2]", "{not json", "\"text\""}) {
    auto bytes = header("ISOH", kProtocolVersion, 0, static_cast<std::uint32_t>(body.size()), 0);
    bytes.insert(bytes.end(), body.begin(), body.end());
    FrameReader reader;
    reader.append(bytes);
    EXPECT_THROW(reader.next(), WireError) << body;
  }
  EXPECT_THROW(encode_frame(nlohmann::ordered_json::array()), WireError);
}

TEST(Frame, HandsAnnouncedDescriptorsToTheirFrame) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  FrameReader reader;
  reader.append_fd(UniqueFd(fds[0]));
  reader.append_fd(UniqueFd(fds[1]));
  reader.append(encode_frame({{"op", "a"}}, 1));
  reader.append(encode_frame({{"op", "b"}}, 1));
  auto a = reader.next();
  auto b = reader.next();
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->buffers.size(), 1U);
  EXPECT_EQ(a->buffers[0].get(), fds[0]);
  EXPECT_EQ(b->buffers[0].get(), fds[1]);
}

TEST(Frame, MissingDescriptorsAreAProtocolError) {
  FrameReader reader;
  reader.append(encode_frame({{"op", "a"}}, 3));
  EXPECT_THROW(reader.next(), WireError);
}

std::vector<std::uint8_t> raw_frame(const std::string& body, std::uint32_t buffers = 0) {
  auto bytes =
      header("ISOH", kProtocolVersion, 0, static_cast<std::uint32_t>(body.size()), buffers);
  bytes.insert(bytes.end(), body.begin(), body.end());
  return bytes;
}

std::string nested(std::size_t depth) {
  return "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
}

TEST(JsonDepth, CountsArraysAndObjectsButNotBracketsInStrings) {
  EXPECT_EQ(json_depth("{}"), 1U);
  EXPECT_EQ(json_depth(R"({"a":[1,{"b":[]}],"c":{}})"), 4U);
  EXPECT_EQ(json_depth(R"({"s":"[[[{{{\"[[["})"), 1U);
  EXPECT_EQ(json_depth("7"), 0U);
  EXPECT_EQ(json_depth(std::string(1000000, '['), 300), 300U) << "stops at its limit";
}

TEST(Frame, NestingBeyondTheLimitIsRefusedBeforeParsing) {
  FrameReader at_limit;
  at_limit.append(raw_frame(nested(kMaxJsonDepth)));
  EXPECT_TRUE(at_limit.next());

  // A million levels: what took the host down with SIGSEGV before the limit.
  FrameReader deep;
  deep.append(raw_frame(nested(1000000)));
  try {
    deep.next();
    FAIL() << "a body nested a million deep was accepted";
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 256 levels deep"), std::string::npos)
        << e.what();
  }
  FrameReader one_over;
  one_over.append(raw_frame(nested(kMaxJsonDepth + 1)));
  EXPECT_THROW(one_over.next(), WireError);
}

TEST(Frame, DescriptorsThatNoFrameClaimsAreClosedAndRefused) {
  const int before = test_support::open_descriptor_count();
  FrameReader reader;
  for (int i = 0; i < 10000; ++i) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    reader.append_fd(UniqueFd(fds[0]));
    reader.append_fd(UniqueFd(fds[1]));
  }
  EXPECT_LE(test_support::open_descriptor_count(), before + static_cast<int>(kMaxPendingFds));
  reader.append(encode_frame({{"op", "ping"}}));
  try {
    reader.next();
    FAIL() << "20000 unannounced descriptors went unremarked";
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find("no frame announced"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace isohost::wire
