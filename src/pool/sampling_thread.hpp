#pragma once

// Memory sampling off the event loop: every worker's smaps_rollup (67 ms for 16 torch workers)
// and NVML's queries run on a thread of their own, and the figures come back to the loop as a
// posted handler, as the hibernator's driver calls do. The sampler is made on that thread at
// its first use and only ever used there.
//
//   sampling.run<std::vector<ProcessMemory>>(
//       [queries](MemorySampler& s) { return s.sample(queries); },
//       [](std::vector<ProcessMemory> figures) { /* on the loop */ });

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/thread_pool.hpp>

#include "pool/memory_sampler.hpp"

namespace isohost::pool {

class SamplingThread {
 public:
  SamplingThread(asio::io_context& loop, std::string simulated_gpu)
      : loop_(loop), simulated_gpu_(std::move(simulated_gpu)) {}
  // Joins the thread; what it was sampling is finished first.
  ~SamplingThread() { thread_.join(); }
  SamplingThread(const SamplingThread&) = delete;
  SamplingThread& operator=(const SamplingThread&) = delete;

  // Runs `work` on the sampling thread, then `done` with its result on the loop, which is kept
  // running until then. `work` must not touch the loop's state; if it throws, `done` gets an
  // empty Result.
  template <class Result>
  void run(std::function<Result(MemorySampler&)> work, std::function<void(Result)> done) {
    asio::post(thread_, [this, work = std::move(work), done = std::move(done),
                         guard = asio::make_work_guard(loop_)]() mutable {
      Result result{};
      try {
        if (!sampler_) sampler_ = std::make_unique<MemorySampler>(simulated_gpu_);
        result = work(*sampler_);
      } catch (const std::exception& e) {
        // `done` still runs, with nothing measured, so that no caller waits for ever.
        spdlog::error("memory sampling failed: {}", e.what());
      }
      asio::post(loop_, [done = std::move(done), result = std::move(result)]() mutable {
        done(std::move(result));
      });
    });
  }

  // Runs `work`, which needs no sampler, on the same thread; the loop is kept running until it
  // has. What it throws is logged.
  void run_off_loop(std::function<void()> work) {
    asio::post(thread_, [work = std::move(work), guard = asio::make_work_guard(loop_)] {
      try {
        work();
      } catch (const std::exception& e) {
        spdlog::error("work off the loop failed: {}", e.what());
      }
    });
  }

 private:
  asio::io_context& loop_;
  std::string simulated_gpu_;
  std::unique_ptr<MemorySampler> sampler_;
  asio::thread_pool thread_{1};
};

}  // namespace isohost::pool
