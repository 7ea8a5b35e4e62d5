#pragma once

#include <string>
#include <vector>

#include "figure.hpp"

namespace isohost::bench {

struct BenchOptions {
  // The interpreter the workers run.
  std::string python = "python3";
  // Repetitions for per-call figures; start figures use a tenth of it (at least 5).
  int rounds = 2000;
  // bench pss: open a CUDA context in each worker after it starts (after the fork).
  bool cuda = false;
};

// rtt.raw_socketpair, rtt.call (from a caller thread) and rtt.call_on_loop (from the loop).
std::vector<Figure> bench_rtt(const BenchOptions& options);
// start.fork (the limit), start.bare, start.torch, and start.torch_zygote (limit start.torch).
std::vector<Figure> bench_start(const BenchOptions& options);
// probe.16_processes (bare workers) and probe.16_processes_torch (each has imported torch).
std::vector<Figure> bench_probe(const BenchOptions& options);
// hibernate.out_per_GiB and in_per_GiB beside pinned copies, context_only_out/_in, and
// wake_4GiB beside start.cold_4GiB (GPU with the driver's checkpoint API only).
std::vector<Figure> bench_hibernate(const BenchOptions& options);
// sleep.out_per_GiB_{1,4,16}GiB and sleep.in_per_GiB_... beside the pinned copy each way
// (target: at most 2.5 times it), the model's checksum checked after every wake; then
// sleep.hibernate_10GiB and sleep.wake_10GiB (sleep, then the driver's checkpoint of what is
// left) beside the one-second target, left out where the driver cannot hibernate (GPU only).
std::vector<Figure> bench_sleep(const BenchOptions& options);
// switch.sleep_per_switch: three environments each holding a 10 GiB model on a card with room for
// two (a foreign process holds the rest), called in turn through admission, the data checked
// after every switch; switch.reap_and_start and switch.in_process_move, the same switch by
// reaping and starting again and by Module.to in one process; each beside the one-second target
// (GPU with at least 23 GiB free only).
std::vector<Figure> bench_switch(const BenchOptions& options);
// transfer.memcpy_64MiB (the limit), transfer.send_64MiB and transfer.recv_64MiB: a 64 MiB
// float32 array to a worker and one back through the Python API (rounds / 100, at least 10).
std::vector<Figure> bench_transfer(const BenchOptions& options);
// admission.decision (the planner with 16 workers in the ledger) beside
// admission.read_16_smaps, the /proc reads every snapshot of 16 workers costs at least.
std::vector<Figure> bench_admission(const BenchOptions& options);
// comfyui.node_isolated.{Invert,Blur} beside the same node in process plus 1 ms and a copy of
// each 1024x1024 IMAGE, and comfyui.workflow10_isolated beside the workflow in process plus 5%
// (bench/comfyui/bench_comfyui.py, run by ComfyUI's interpreter).
std::vector<Figure> bench_comfyui(const BenchOptions& options);
// pss.fresh and pss.zygote (limit: pss.fresh): the PSS each extra worker with torch imported
// adds, fresh or forked from a zygote; "_cuda" names with BenchOptions::cuda.
std::vector<Figure> bench_pss(const BenchOptions& options);

}  // namespace isohost::bench
