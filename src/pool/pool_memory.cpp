// The pool's status with memory (pool.hpp): each live worker's report asked on its side lane
// (answered even mid-call; a busy one's last report stands in for admission), RAM and VRAM
// measured from outside on the sampling thread, the last such status kept for views that ask
// every second, and the live view's metrics over it.

#include <unistd.h>

#include <algorithm>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "pool/memory_snapshot.hpp"
#include "pool/pool.hpp"
#include "probe/probe_error.hpp"

namespace isohost::pool {

using worker::WorkerState;

namespace {

// What a status with memory measures from outside, taken on the sampling thread.
struct StatusSample {
  std::vector<ProcessMemory> processes;  // as queried: the host, then each worker
  std::vector<DeviceMemory> devices;
  std::vector<ProcessMemory> zygotes;  // a zygote never opens a CUDA context: RAM only
  std::string gpu_unavailable_reason;
  std::optional<probe::SystemMemory> system_memory;
};

StatusSample take_sample(MemorySampler& sampler, const std::vector<ProcessQuery>& processes,
                         const std::vector<ProcessQuery>& ours,
                         const std::vector<ProcessQuery>& zygotes, MemorySampler::RamReading ram) {
  StatusSample out{
      .processes = sampler.sample(processes, ram),
      .devices = sampler.devices_now(ours),
      .zygotes = zygotes.empty() ? std::vector<ProcessMemory>{} : sampler.sample(zygotes),
      .gpu_unavailable_reason = sampler.gpu_unavailable_reason()};
  try {
    out.system_memory = probe::read_system_memory();
  } catch (const probe::ProbeError&) {
  }
  return out;
}

}  // namespace

std::future<PoolStatus> Pool::status_with_memory() {
  auto promise = std::make_shared<std::promise<PoolStatus>>();
  auto future = promise->get_future();
  asio::post(io(), [this, promise] {
    status_with_memory_on_loop(
        [promise](PoolStatus status) { promise->set_value(std::move(status)); });
  });
  return future;
}

void Pool::status_with_memory_on_loop(std::function<void(PoolStatus)> done, Reports reports,
                                      MemorySampler::RamReading ram) {
  struct Gather {
    PoolStatus status;
    std::size_t remaining = 0;
    bool finished = false;
    std::function<void(PoolStatus)> done;
    std::unique_ptr<asio::steady_timer> timer;
  };
  auto gather = std::make_shared<Gather>();
  gather->status = status_on_loop();
  gather->remaining = gather->status.workers.size() + 1;
  gather->done = std::move(done);
  gather->timer = std::make_unique<asio::steady_timer>(io(), options_.report_wait);
  auto finish = [this, gather, ram](bool now) {
    if (gather->finished || (!now && --gather->remaining > 0)) return;
    gather->finished = true;
    gather->timer->cancel();
    std::vector<ProcessQuery> queries{{::getpid(), false}};
    // A hibernated worker's context is in its host RAM: it holds no VRAM whatever its report says.
    for (const auto& w : gather->status.workers) {
      const bool cuda = w.report.is_object() && w.report.value("cuda_initialized", false);
      queries.push_back({w.pid, cuda && !w.hibernation, w.device});
    }
    auto ours = queries;
    for (const auto& w : live_) ours.push_back({w->pid(), false});  // retiring ones are ours too
    std::vector<ProcessQuery> zygotes;
    for (const auto& z : gather->status.zygotes) zygotes.push_back({z.pid, false});
    sampling_.run<StatusSample>(
        [queries, ours, zygotes, ram](MemorySampler& sampler) {
          return take_sample(sampler, queries, ours, zygotes, ram);
        },
        [this, gather, count = queries.size()](StatusSample sample) {
          auto& status = gather->status;
          if (sample.processes.size() == count) {
            status.host_memory = sample.processes[0];
            for (std::size_t i = 0; i < status.workers.size(); ++i)
              status.workers[i].memory = sample.processes[i + 1];
          }
          for (std::size_t i = 0; i < status.zygotes.size() && i < sample.zygotes.size(); ++i) {
            if (status.zygotes[i].pid > 0) status.zygotes[i].memory = sample.zygotes[i];
          }
          status.devices = std::move(sample.devices);
          status.gpu_unavailable_reason = std::move(sample.gpu_unavailable_reason);
          status.system_memory = sample.system_memory;
          status.snapshot =
              make_snapshot(status, config_.host, admission_.grants().outstanding(), Clock::now());
          recent_memory_ = RecentMemory{.status = status, .at = Clock::now()};
          gather->done(std::move(status));
        });
  };
  gather->timer->async_wait([finish](const asio::error_code& ec) {
    if (!ec) finish(true);
  });
  for (std::size_t i = 0; i < gather->status.workers.size(); ++i) {
    auto it = slots_.find(gather->status.workers[i].env);
    if (it == slots_.end() || !it->second.worker) {
      finish(false);
      continue;
    }
    if (reports == Reports::cached_while_busy && it->second.worker->state() == WorkerState::busy) {
      if (auto cached = cached_report(gather->status.workers[i].pid)) {
        gather->status.workers[i].report = std::move(*cached);
        finish(false);
        continue;
      }
    }
    it->second.worker->query("memory", [gather, i, finish](Outcome outcome) {
      if (outcome.ok() && !gather->finished) gather->status.workers[i].report = outcome.value();
      finish(false);
    });
  }
  finish(false);
}

std::optional<nlohmann::ordered_json> Pool::cached_report(pid_t pid) const {
  if (!recent_memory_) return std::nullopt;
  for (const auto& w : recent_memory_->status.workers) {
    if (w.pid == pid && w.report.is_object()) return w.report;
  }
  return std::nullopt;
}

void Pool::status_with_recent_memory_on_loop(std::chrono::milliseconds max_age,
                                             std::function<void(PoolStatus)> done) {
  if (!recent_memory_ || Clock::now() - recent_memory_->at > max_age) {
    status_with_memory_on_loop(std::move(done));
    return;
  }
  auto status = status_on_loop();
  const auto& sample = recent_memory_->status;
  for (auto& w : status.workers) {
    const auto it = std::find_if(sample.workers.begin(), sample.workers.end(),
                                 [&w](const WorkerStatus& s) { return s.pid == w.pid; });
    if (it == sample.workers.end()) continue;
    w.memory = it->memory;
    w.report = it->report;
  }
  for (auto& z : status.zygotes) {
    const auto it = std::find_if(sample.zygotes.begin(), sample.zygotes.end(),
                                 [&z](const ZygoteStatus& s) { return s.pid == z.pid; });
    if (it != sample.zygotes.end() && z.pid > 0) z.memory = it->memory;
  }
  status.host_memory = sample.host_memory;
  status.devices = sample.devices;
  status.gpu_unavailable_reason = sample.gpu_unavailable_reason;
  status.system_memory = sample.system_memory;
  status.snapshot = sample.snapshot;
  done(std::move(status));
}

void Pool::metrics_on_loop(std::chrono::milliseconds max_age,
                           std::function<void(PoolMetrics)> done) {
  status_with_recent_memory_on_loop(max_age, [this, done = std::move(done)](PoolStatus status) {
    PoolMetrics metrics{.status = std::move(status), .taken_at = Clock::now()};
    if (recent_memory_) {  // always, once a status with memory has been taken
      metrics.sample_age_seconds =
          std::chrono::duration<double>(metrics.taken_at - recent_memory_->at).count();
    }
    metrics.uptime_seconds =
        std::chrono::duration<double>(metrics.taken_at - loop_.started_at()).count();
    metrics.ram_sweeps = ram_pressure_.sweeps();
    for (const auto& [name, slot] : slots_) metrics.envs.emplace(name, slot.metrics);
    done(std::move(metrics));
  });
}

std::future<PoolMetrics> Pool::metrics(std::chrono::milliseconds max_age) {
  auto promise = std::make_shared<std::promise<PoolMetrics>>();
  auto future = promise->get_future();
  asio::post(io(), [this, promise, max_age] {
    metrics_on_loop(max_age, [promise](PoolMetrics m) { promise->set_value(std::move(m)); });
  });
  return future;
}

}  // namespace isohost::pool
