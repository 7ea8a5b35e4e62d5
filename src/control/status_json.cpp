#include "control/status_json.hpp"

#include "memory/ledger.hpp"

namespace isohost::control {
namespace {

nlohmann::ordered_json optional_json(const std::optional<std::uint64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

// RSS, PSS, private, VRAM of one process; nulls where unknown, never a guessed 0.
void add_memory(nlohmann::ordered_json& out, const std::optional<pool::ProcessMemory>& memory) {
  if (!memory) return;
  if (memory->ram) {
    out["rss"] = memory->ram->rss;
    out["pss"] = memory->ram->pss;
    out["private"] = memory->ram->private_bytes();
    out["private_anon"] = memory->ram->pss_anon;
    out["swap"] = memory->ram->swap;
    // Of the PSS, pages given back with MADV_FREE (a sleep's kept or prepared host buffer):
    // the kernel's to take back, as of the last full read of smaps.
    out["lazy_free"] = memory->ram->lazy_free;
  } else {
    out["memory_error"] = memory->error;
  }
  out["vram"] = optional_json(memory->vram);
  out["vram_method"] = memory->vram_method;
}

// Per device, the books: what the card has, what isohost's workers hold split by what gives it
// back, what other processes hold, what is kept in reserve and what is promised.
nlohmann::ordered_json devices_json(const pool::PoolStatus& status) {
  auto out = nlohmann::ordered_json::array();
  const auto ledger = status.snapshot ? memory::build_ledger(*status.snapshot) : memory::Ledger{};
  for (const auto& d : status.devices) {
    nlohmann::ordered_json entry{{"index", d.device.index}, {"name", d.device.name},
                                 {"total", d.device.total}, {"free", d.device.free},
                                 {"used", d.device.used},   {"foreign", optional_json(d.foreign)}};
    if (const auto* books = ledger.device(static_cast<int>(d.device.index))) {
      entry["workers_vram"] = books->workers_used();
      entry["fixed"] = books->workers_fixed();
      entry["held"] = books->workers_held();
      entry["reclaimable"] = books->workers_reclaimable();
      entry["reserve"] = books->reserve;
      entry["pending"] = books->pending;
      entry["grantable"] = books->grantable();
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

nlohmann::ordered_json status_json(const pool::PoolStatus& status) {
  auto workers_json = nlohmann::ordered_json::array();
  for (const auto& w : status.workers) {
    nlohmann::ordered_json entry{
        {"env", w.env},
        {"pid", w.pid},
        {"generation", w.generation},
        {"state", w.state},
        {"idle_seconds", w.idle_seconds},
        {"calls", w.calls},
        {"kept", w.kept},
        // A worker still starting has said no hello yet (null).
        {"python",
         w.hello.is_object() ? w.hello.value("python", nlohmann::ordered_json()) : nullptr},
        {"torch", w.hello.is_object() ? w.hello.value("torch", nlohmann::ordered_json()) : nullptr},
        {"origin", w.origin},
        {"zygote_pid",
         w.zygote_pid > 0 ? nlohmann::ordered_json(w.zygote_pid) : nlohmann::ordered_json()}};
    add_memory(entry, w.memory);
    if (w.memory) {
      // Fixed: the context (VRAM used less what the allocator holds) and the RAM at ready.
      // Reclaimable: the allocator's cache, which release gives back.
      // A worker that did not answer (it died, or its call holds the GIL) has no report.
      const auto report = w.report.is_object() ? w.report : nlohmann::ordered_json::object();
      const auto allocator = report.value("allocator", nlohmann::ordered_json());
      const std::uint64_t reserved =
          allocator.is_object() ? allocator.value("reserved", std::uint64_t{0}) : 0;
      const std::uint64_t allocated =
          allocator.is_object() ? allocator.value("allocated", std::uint64_t{0}) : 0;
      entry["allocator_reserved"] =
          allocator.is_object() ? nlohmann::ordered_json(reserved) : nlohmann::ordered_json();
      entry["fixed_vram"] =
          w.memory->vram
              ? nlohmann::ordered_json(*w.memory->vram > reserved ? *w.memory->vram - reserved : 0)
              : nlohmann::ordered_json();
      entry["fixed_ram"] = optional_json(w.pss_at_ready);
      entry["reclaimable_vram"] = reserved > allocated ? reserved - allocated : 0;
      entry["cuda_initialized"] = report.value("cuda_initialized", false);
    }
    if (w.hibernation) entry["hibernation"] = w.hibernation->to_json();
    if (w.sleep) entry["sleep"] = w.sleep->to_json();
    workers_json.push_back(std::move(entry));
  }
  nlohmann::ordered_json host{{"pid", status.host_pid}};
  add_memory(host, status.host_memory);
  nlohmann::ordered_json out{{"host", std::move(host)}, {"workers", std::move(workers_json)}};
  out["zygotes"] = nlohmann::ordered_json::array();
  for (const auto& z : status.zygotes) out["zygotes"].push_back(z.to_json());
  if (status.host_memory) {
    out["devices"] = devices_json(status);
    if (status.devices.empty()) out["gpu"] = status.gpu_unavailable_reason;
  }
  if (status.system_memory) {
    out["system_memory"] = {{"total", status.system_memory->total},
                            {"available", status.system_memory->available}};
  }
  // The admission planner's prices, in seconds per GiB (start: seconds), as measured so far.
  out["transfer_rates"] = {
      {"sleep_out", status.rates.sleep_out},   {"sleep_in", status.rates.sleep_in},
      {"driver_out", status.rates.driver_out}, {"driver_in", status.rates.driver_in},
      {"reload", status.rates.reload},         {"start", status.rates.start}};
  return out;
}

}  // namespace isohost::control
