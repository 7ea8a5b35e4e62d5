// The pool's side of zygotes (docs/lifecycle.md#zygotes): one per environment with `preload`,
// started with the host (`prestart`) or at the first need, and asked to fork each new worker.

#include <spdlog/spdlog.h>
#include <asio/post.hpp>

#include "pool/pool.hpp"

namespace isohost::pool {

using worker::Worker;

void Pool::make_zygotes() {
  for (auto& [name, slot] : slots_) {
    if (slot.config.preload.empty()) continue;
    auto options = worker_options(slot, 0);
    options.preload = slot.config.preload;
    Slot* s = &slot;
    slot.zygote = std::make_unique<Zygote>(io(), std::move(options), [this, s] {
      if (!phase_.serving()) {
        finish_shutdown_if_done();
      } else {
        pump(*s);
      }
    });
    // On the loop thread, which the zygote's death signal follows.
    if (slot.config.prestart) asio::post(io(), [s] { s->zygote->prepare(); });
  }
}

void Pool::fork_worker(Slot& slot) {
  const unsigned generation = ++slot.generation;  // retired generations are never reused
  slot.state = EnvState::forking;
  slot.zygote->fork(
      slot.config.name, generation,
      [this, &slot, generation](std::optional<worker::AdoptedProcess> child,
                                const std::string& failure) {
        slot.state = EnvState::empty;
        if (!child) {
          if (!phase_.serving()) {
            pump(slot);  // fails what is queued
            finish_shutdown_if_done();
            return;
          }
          spdlog::warn(
              "could not fork worker '{}' (generation {}) from its zygote: {}; starting it fresh",
              slot.config.name, generation, failure);
          spawn_worker(slot, generation);
          return;
        }
        child->start_began = slot.start_began;
        auto weak = std::make_shared<std::weak_ptr<Worker>>();
        slot.worker = Worker::adopt(io(), worker_options(slot, generation), std::move(*child),
                                    worker_events(slot, weak));
        track_started(slot, weak, "zygote");
        if (!phase_.serving()) retire(slot, "host shutdown");
      });
}

}  // namespace isohost::pool
