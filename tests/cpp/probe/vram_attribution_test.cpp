#include "probe/vram_attribution.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace isohost::probe {
namespace {

constexpr uint64_t MiB = 1024 * 1024;
using A = VramAttribution;

GpuProcess listed(pid_t pid, std::optional<uint64_t> used) { return GpuProcess{pid, used, false}; }

struct Case {
  std::string name;
  std::vector<GpuProcess> nvml;
  std::vector<WorkerCudaState> workers;
  std::vector<VramSource> expected;
};

TEST(AttributeVram, Table) {
  const std::vector<Case> cases = {
      {"same namespace: listed workers use NVML's figure",
       {listed(100, 500 * MiB), listed(200, 900 * MiB), listed(7, 300 * MiB)},
       {{100, true}, {200, true}},
       {{100, A::nvml_pid, 500 * MiB}, {200, A::nvml_pid, 900 * MiB}}},
      {"other namespace: NVML lists processes, none of ours",
       {listed(40100, 500 * MiB), listed(40200, 900 * MiB)},
       {{100, true}, {200, true}},
       {{100, A::device_free_drop, std::nullopt}, {200, A::device_free_drop, std::nullopt}}},
      {"NVML lists nothing at all while workers report contexts",
       {},
       {{100, true}},
       {{100, A::device_free_drop, std::nullopt}}},
      {"no context and not listed holds nothing",
       {listed(40100, 500 * MiB)},
       {{100, false}, {200, true}},
       {{100, A::no_context, std::nullopt}, {200, A::device_free_drop, std::nullopt}}},
      {"same namespace, one worker missing though it reports a context: sample again",
       {listed(100, 500 * MiB)},
       {{100, true}, {200, true}, {300, false}},
       {{100, A::nvml_pid, 500 * MiB}, {200, A::unknown, std::nullopt}, {300, A::no_context, std::nullopt}}},
      {"listed without a figure (MIG)",
       {listed(100, std::nullopt), listed(200, 64 * MiB)},
       {{100, true}, {200, true}},
       {{100, A::device_free_drop, std::nullopt}, {200, A::nvml_pid, 64 * MiB}}},
      {"listed although the worker's report says no context: NVML wins",
       {listed(100, 310 * MiB)},
       {{100, false}},
       {{100, A::nvml_pid, 310 * MiB}}},
      {"no workers", {listed(1, 1)}, {}, {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(attribute_vram(c.nvml, c.workers), c.expected) << c.name;
  }
}

TEST(PidsVisible, Table) {
  EXPECT_TRUE(pids_visible({listed(5, 1), listed(100, 1)}, {100, 200}));
  EXPECT_FALSE(pids_visible({listed(5, 1)}, {100, 200}));
  EXPECT_FALSE(pids_visible({}, {100}));
  EXPECT_FALSE(pids_visible({listed(100, 1)}, {}));
}

}  // namespace
}  // namespace isohost::probe
