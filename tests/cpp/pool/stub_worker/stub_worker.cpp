// A worker that is not Python: it speaks the protocol (docs/protocol.md) the simplest way that
// is right, so that the pool's timers and back-off are driven through real processes and
// sockets in a few milliseconds a start (clocked_pool_test.cpp). The host starts it as an
// environment's interpreter, with the worker's usual arguments: it reads `--env NAME` and
// ignores the rest.
//
// Main lane: `call` answers with its `args`; `release` with an empty receipt; anything else with
// an error; `shutdown` or end-of-file ends it. Side lane: `ping` and `memory` (a report with no
// torch). Each op it reads is appended, one line each, to $ISOHOST_STUB_LOG where that is set.

#include <poll.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "wire/frame.hpp"
#include "wire/socket_io.hpp"

namespace {

using isohost::wire::Frame;
using isohost::wire::FrameReader;
using json = nlohmann::ordered_json;

constexpr int kMain = 3;
constexpr int kSide = 4;

void log_op(const std::string& lane, const json& body) {
  const char* path = std::getenv("ISOHOST_STUB_LOG");
  if (path == nullptr) return;
  std::ofstream(path, std::ios::app) << lane << " " << body.value("op", "?") << "\n";
}

json reply(const json& request, json value) {
  return {{"op", "reply"}, {"id", request.value("id", json())}, {"ok", true}, {"value", value}};
}

json refusal(const json& request) {
  return {{"op", "reply"},
          {"id", request.value("id", json())},
          {"ok", false},
          {"error",
           {{"type", "NotImplementedError"},
            {"message", "the stub worker does not do " + request.value("op", std::string("?"))},
            {"where", "runtime"},
            {"traceback", ""}}}};
}

// False when the host asked it to end.
bool serve_main(const json& request) {
  const auto op = request.value("op", std::string());
  if (op == "shutdown") return false;
  if (op == "call") {
    isohost::wire::send_frame(kMain, reply(request, request.value("args", json::array())));
  } else if (op == "release") {
    isohost::wire::send_frame(kMain, reply(request, json::object()));
  } else {
    isohost::wire::send_frame(kMain, refusal(request));
  }
  return true;
}

void serve_side(const json& request) {
  const auto op = request.value("op", std::string());
  const auto pid = static_cast<int>(::getpid());
  if (op == "ping") {
    isohost::wire::send_frame(kSide, reply(request, {{"pid", pid}}));
  } else if (op == "memory") {
    isohost::wire::send_frame(kSide, reply(request, {{"pid", pid},
                                                     {"release_can_free", 0},
                                                     {"torch", nullptr},
                                                     {"torch_imported", false},
                                                     {"cuda_initialized", false},
                                                     {"cuda_module_loading", nullptr},
                                                     {"device", nullptr},
                                                     {"allocator", nullptr},
                                                     {"asleep", nullptr}}));
  } else {
    isohost::wire::send_frame(kSide, refusal(request));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string env = "stub";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--env") == 0) env = argv[i + 1];
  }
  isohost::wire::send_frame(kMain, {{"op", "hello"},
                                    {"protocol", 2},
                                    {"pid", static_cast<int>(::getpid())},
                                    {"env", env},
                                    {"python", "stub"},
                                    {"executable", argv[0]},
                                    {"torch", nullptr},
                                    {"capabilities", {"call", "ping", "memory"}}});
  std::array<FrameReader, 2> readers;
  std::array<pollfd, 2> lanes{pollfd{.fd = kMain, .events = POLLIN, .revents = 0},
                              pollfd{.fd = kSide, .events = POLLIN, .revents = 0}};
  for (;;) {
    if (::poll(lanes.data(), lanes.size(), -1) < 0) continue;  // EINTR
    for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
      if (lanes[lane].revents == 0) continue;
      std::optional<Frame> frame = isohost::wire::receive_frame(lanes[lane].fd, readers[lane]);
      if (!frame) return 0;  // end-of-file: the host is gone
      while (frame) {
        log_op(lane == 0 ? "main" : "side", frame->body);
        if (lane == 1) {
          serve_side(frame->body);
        } else if (!serve_main(frame->body)) {
          return 0;
        }
        frame = readers[lane].next();
      }
    }
  }
}
