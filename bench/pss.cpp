// pss.fresh and pss.zygote: what each extra worker with torch imported adds to the machine's
// RAM (PSS, MB), started fresh or forked from a zygote that preloaded torch. With --cuda each
// worker also opens a CUDA context after it starts (after the fork), never the zygote.
//
// Workers are started one by one; after each, the PSS of every process involved (the workers,
// and the zygote, which holds the shared pages) is summed, and each sample is the growth of
// that sum from one worker more. PSS splits shared pages between their users, so the sum is
// the machine's true cost, and its growth is the marginal cost of one more worker.

#include "benchmarks.hpp"

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "pool/zygote.hpp"
#include "probe/smaps.hpp"
#include "proc/orphan_sweep.hpp"
#include "worker/runtime_location.hpp"
#include "worker/worker.hpp"

namespace isohost::bench {
namespace {

constexpr int kWorkers = 5;
constexpr auto kTimeout = std::chrono::seconds(120);

// An event loop on its own thread, which every spawn and fork goes through (the death signal of
// what it starts follows that thread).
class Loop {
 public:
  Loop() : work_(io_.get_executor()), thread_([this] { io_.run(); }) {}
  ~Loop() {
    work_.reset();
    thread_.join();
  }
  // Runs `start` on the loop; it calls `finish` (on the loop) with nullptr or a failure.
  void run(const std::function<void(std::function<void(const std::string*)>)>& start) {
    auto promise = std::make_shared<std::promise<void>>();
    auto future = promise->get_future();
    asio::post(io_, [start, promise] {
      try {
        start([promise](const std::string* failure) {
          if (failure == nullptr) {
            promise->set_value();
          } else {
            promise->set_exception(std::make_exception_ptr(std::runtime_error(*failure)));
          }
        });
      } catch (const std::exception& e) {
        promise->set_exception(std::current_exception());
      }
    });
    if (future.wait_for(kTimeout) != std::future_status::ready)
      throw std::runtime_error("bench pss: timed out");
    future.get();
  }
  asio::io_context& io() { return io_; }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

using Done = std::function<void(const std::string*)>;

// Ends every worker and the zygote, and waits until the loop has reaped them, also when a
// figure fails half-way (a GPU-less machine asked for --cuda): the loop's thread only ends once
// nothing is left to watch.
class EndAll {
 public:
  EndAll(Loop& loop, std::vector<std::shared_ptr<worker::Worker>>& workers,
         std::unique_ptr<pool::Zygote>* zygote = nullptr)
      : loop_(loop), workers_(workers), zygote_(zygote) {}
  ~EndAll() {
    try {
      loop_.run([this](std::function<void(const std::string*)> done) {
        for (auto& w : workers_) w->shutdown(std::chrono::seconds(1));
        if (zygote_ != nullptr && *zygote_) (*zygote_)->shutdown(std::chrono::seconds(1));
        done(nullptr);
      });
      // The zygote's handlers refer to it: it goes only once its process has been reaped.
      for (bool alive = zygote_ != nullptr && *zygote_; alive;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        loop_.run([&](std::function<void(const std::string*)> done) {
          alive = (*zygote_)->alive();
          done(nullptr);
        });
      }
    } catch (const std::exception&) {
      // Nothing more can be done from a destructor; the death signal still covers the rest.
    }
  }
  EndAll(const EndAll&) = delete;
  EndAll& operator=(const EndAll&) = delete;

 private:
  Loop& loop_;
  std::vector<std::shared_ptr<worker::Worker>>& workers_;
  std::unique_ptr<pool::Zygote>* zygote_;
};

// Once the worker is ready: import torch (and open a context), then `done`.
worker::Worker::Events prepare_events(std::shared_ptr<std::shared_ptr<worker::Worker>> slot,
                                      bool cuda, Done done) {
  return {.on_ready =
              [slot, cuda, done](const isohost::Error* error) {
                if (error != nullptr) {
                  const std::string what = error->what();
                  done(&what);
                  return;
                }
                auto call = [slot](const std::string& target, worker::Worker::Handler then) {
                  (*slot)->request(
                      {{"op", "call"},
                       {"target", target},
                       {"args", target.ends_with("module") ? nlohmann::ordered_json{"torch"}
                                                           : nlohmann::ordered_json::array()},
                       {"kwargs", nlohmann::ordered_json::object()}},
                      std::chrono::seconds(120), target, std::move(then));
                };
                call("isohost_worker.stages:import_module", [call, cuda, done](worker::Outcome o) {
                  if (!o.ok()) {
                    const std::string what = o.error().what();
                    done(&what);
                  } else if (!cuda) {
                    done(nullptr);
                  } else {
                    call("isohost_worker.stages:open_cuda_context", [done](worker::Outcome c) {
                      const std::string what = c.ok() ? "" : c.error().what();
                      done(c.ok() ? nullptr : &what);
                    });
                  }
                });
              },
          .on_exit = [](const worker::ExitReport&) {}};
}

double total_pss_mb(const std::vector<pid_t>& pids) {
  double total = 0;
  for (pid_t pid : pids) total += static_cast<double>(probe::read_footprint(pid).pss) / 1e6;
  return total;
}

worker::WorkerOptions base_options(const BenchOptions& options) {
  return {.env_name = "pss",
          .python = options.python,
          .runtime_dir = worker::find_worker_runtime(),
          .host_tag = proc::host_tag(),
          .start_timeout = kTimeout};
}

// Starts kWorkers workers with `start_one` and returns the growth of the PSS sum per worker.
std::vector<double> marginal_pss(Loop& loop,
                                 const std::function<void(Done, std::vector<pid_t>&)>& start_one,
                                 std::vector<pid_t>& measured) {
  std::vector<double> samples;
  double previous = 0;
  for (int i = 0; i < kWorkers; ++i) {
    loop.run([&](Done done) { start_one(std::move(done), measured); });
    const double now = total_pss_mb(measured);
    if (i > 0) samples.push_back(now - previous);
    previous = now;
  }
  return samples;
}

Figure fresh_figure(const BenchOptions& options, const std::string& name) {
  Loop loop;
  std::vector<std::shared_ptr<worker::Worker>> workers;
  EndAll end_all(loop, workers);
  std::vector<pid_t> pids;
  auto samples = marginal_pss(
      loop,
      [&](Done done, std::vector<pid_t>& measured) {
        auto slot = std::make_shared<std::shared_ptr<worker::Worker>>();
        *slot = worker::Worker::launch(loop.io(), base_options(options),
                                       prepare_events(slot, options.cuda, done));
        workers.push_back(*slot);
        measured.push_back((*slot)->pid());
      },
      pids);
  return summarize(name, "MB", samples);
}

Figure zygote_figure(const BenchOptions& options, const std::string& name, const Figure& limit) {
  Loop loop;
  auto zygote_options = base_options(options);
  zygote_options.preload = {"torch"};
  std::unique_ptr<pool::Zygote> zygote;
  std::vector<std::shared_ptr<worker::Worker>> workers;
  EndAll end_all(loop, workers, &zygote);
  auto ready = std::make_shared<std::promise<void>>();
  loop.run([&](Done done) {
    zygote = std::make_unique<pool::Zygote>(loop.io(), zygote_options, [&zygote, ready] {
      if (zygote->status().state != "starting") {
        try {
          ready->set_value();
        } catch (const std::future_error&) {
        }
      }
    });
    if (zygote->prepare() == pool::Zygote::Readiness::unavailable) {
      const std::string what = "the zygote did not start";
      done(&what);
      return;
    }
    done(nullptr);
  });
  if (ready->get_future().wait_for(kTimeout) != std::future_status::ready)
    throw std::runtime_error("zygote not ready");
  std::vector<pid_t> pids;
  loop.run([&](Done done) {
    const auto status = zygote->status();
    const std::string what =
        "the zygote is " + status.state + (status.refusal ? ": " + *status.refusal : "");
    if (status.state != "ready") {
      done(&what);
      return;
    }
    pids.push_back(zygote->pid());
    done(nullptr);
  });
  unsigned generation = 0;
  auto samples = marginal_pss(
      loop,
      [&](Done done, std::vector<pid_t>& measured) {
        zygote->fork(
            "pss", ++generation,
            [&, done](std::optional<worker::AdoptedProcess> child, const std::string& failure) {
              if (!child) {
                done(&failure);
                return;
              }
              auto slot = std::make_shared<std::shared_ptr<worker::Worker>>();
              measured.push_back(child->pid);
              *slot = worker::Worker::adopt(loop.io(), base_options(options), std::move(*child),
                                            prepare_events(slot, options.cuda, done));
              workers.push_back(*slot);
            });
      },
      pids);
  auto figure = summarize(name, "MB", samples);
  figure.limit = limit.median;
  figure.limit_name = limit.name;
  return figure;
}

}  // namespace

std::vector<Figure> bench_pss(const BenchOptions& options) {
  const std::string suffix = options.cuda ? "_cuda" : "";
  auto fresh = fresh_figure(options, "pss.fresh" + suffix);
  return {fresh, zygote_figure(options, "pss.zygote" + suffix, fresh)};
}

}  // namespace isohost::bench
