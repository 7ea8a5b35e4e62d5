#pragma once

// What a caller asks of an environment's worker: Pool::submit takes one.

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "wire/shared_fds.hpp"

namespace isohost::pool {

// What a caller asks of an environment's worker.
struct Request {
  enum class Kind {
    call,       // run module:function on the main lane
    release,    // ask the worker to drop its caches (main lane, when idle)
    reap,       // end the worker once it is idle
    query,      // side lane: ping or memory, answered even mid-call
    hibernate,  // move the idle worker's GPU state into its host RAM (never starts one)
    sleep,      // the idle worker moves its models into its host RAM itself (never starts one)
    wake,       // restore a hibernated or asleep worker without a call
    // The embedding host itself needs VRAM (`message`: {"bytes", "device"}): admission makes
    // room with idle workers as for a worker's reserve_vram, and books no grant. `env` unused.
    make_room,
    // Keep the environment's workers alive (`message`: {"kept": bool}): while kept, no worker of
    // it is reaped for admission, RAM pressure or idleness (release, sleep and hibernation keep
    // the process, and what it holds); a caller's job still needs what they hold. Never starts
    // one; an explicit reap still ends it.
    keep,
  };
  Kind kind = Kind::call;
  std::string env;
  // call: target, args, kwargs. query: op.
  nlohmann::ordered_json message = nlohmann::ordered_json::object();
  // call: the memfds of a pickled value in `message` ("pickle"), forwarded to the worker
  // untouched (docs/protocol.md, "Values").
  wire::SharedFds buffers;
  // call: serves the worker's asks and tells while this call runs (docs/protocol.md, "Asks").
  // Runs on the loop thread and must not block; its `answer` may be called once, from any
  // thread, while the pool lives. Unset: the worker's asks are answered as unsupported.
  std::function<void(const nlohmann::ordered_json& ask,
                     std::function<void(nlohmann::ordered_json reply)> answer)>
      on_ask;
  // call: names it for Pool::interrupt (Pool::new_ticket); 0: it cannot be interrupted.
  std::uint64_t ticket = 0;

  static Request call(std::string env, std::string target,
                      nlohmann::ordered_json args = nlohmann::ordered_json::array(),
                      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object());
};

}  // namespace isohost::pool
