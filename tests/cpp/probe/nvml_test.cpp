#include "probe/nvml.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "fake_nvml/fake_nvml.hpp"
#include "fixtures.hpp"
#include "probe/probe_error.hpp"
#include "probe/vram_attribution.hpp"

namespace isohost::probe {
namespace {

constexpr uint64_t MiB = 1024 * 1024;
constexpr unsigned long long not_available = 0xFFFFFFFFFFFFFFFFULL;

// ---- merging (pure) ----

TEST(MergeGpuProcesses, Table) {
  using P = GpuProcess;
  struct Case {
    const char* name;
    std::vector<P> compute, graphics, expected;
  };
  const std::vector<Case> cases = {
      {"empty", {}, {}, {}},
      {"both lists, distinct pids",
       {{1, 10, false}},
       {{2, 20, false}},
       {{1, 10, false}, {2, 20, true}}},
      {"a pid on both lists counts once, as compute",
       {{1, 10, false}},
       {{1, 10, false}, {3, 30, false}},
       {{1, 10, false}, {3, 30, true}}},
      {"unknown usage stays unknown", {{1, std::nullopt, false}}, {}, {{1, std::nullopt, false}}},
      {"a pid twice in one list (MIG instances) is summed",
       {{1, 10, false}, {1, 5, false}},
       {},
       {{1, 15, false}}},
      {"summed with an unknown part is unknown",
       {{1, 10, false}, {1, std::nullopt, false}},
       {},
       {{1, std::nullopt, false}}},
      {"graphics-only pid twice is summed; compute one on graphics skipped twice",
       {{1, 10, false}},
       {{2, 4, false}, {1, 10, false}, {2, 6, false}, {1, 10, false}},
       {{1, 10, false}, {2, 10, true}}},
  };
  for (const Case& c : cases) EXPECT_EQ(merge_gpu_processes(c.compute, c.graphics), c.expected) << c.name;
}

// ---- opening without a usable library ----

TEST(NvmlOpen, RealLibraryEitherOpensOrSaysWhy) {
  const NvmlOpenResult opened = Nvml::open();
  if (opened.nvml) {
    EXPECT_TRUE(opened.failure.empty());
    EXPECT_FALSE(opened.nvml->driver_version().empty());
  } else {
    // This machine has no driver: a reason a person can act on.
    EXPECT_EQ(opened.failure.rfind("libnvidia-ml.so.1 not found: ", 0), 0u) << opened.failure;
  }
}

TEST(NvmlOpen, MissingLibrary) {
  const NvmlOpenResult opened = Nvml::open("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(opened.nvml, nullptr);
  EXPECT_EQ(opened.failure.rfind("/nonexistent/libnvidia-ml.so.1 not found: ", 0), 0u) << opened.failure;
  EXPECT_NE(opened.failure.find("No such file"), std::string::npos) << opened.failure;
}

TEST(NvmlOpen, LibraryThatIsNotNvml) {
  const NvmlOpenResult opened = Nvml::open("libm.so.6");
  EXPECT_EQ(opened.nvml, nullptr);
  EXPECT_EQ(opened.failure, "libm.so.6 lacks nvmlInit_v2");
}

// ---- the fake library: every path of the real code without a driver ----

class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::fake_nvml_path();
    if (path_.empty()) GTEST_SKIP() << "built without ISOHOST_FAKE_NVML_PATH";
    library_ = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library_, nullptr) << ::dlerror();
    configure_ = reinterpret_cast<decltype(configure_)>(::dlsym(library_, "fake_nvml_configure"));
    open_sessions_ = reinterpret_cast<decltype(open_sessions_)>(::dlsym(library_, "fake_nvml_open_sessions"));
    short_calls_ = reinterpret_cast<decltype(short_calls_)>(::dlsym(library_, "fake_nvml_short_calls"));
    ASSERT_TRUE(configure_ && open_sessions_ && short_calls_);
    config_ = std::make_unique<FakeNvmlConfig>();
    std::memset(config_.get(), 0, sizeof(FakeNvmlConfig));
    config_->newest_list_version = 3;
  }

  void TearDown() override {
    if (library_ != nullptr) ::dlclose(library_);
  }

  void add_compute(unsigned pid, unsigned long long used) { config_->compute[config_->compute_count++] = {pid, used}; }
  void add_graphics(unsigned pid, unsigned long long used) {
    config_->graphics[config_->graphics_count++] = {pid, used};
  }

  std::unique_ptr<Nvml> open() {
    configure_(config_.get());
    NvmlOpenResult opened = Nvml::open(path_.c_str());
    EXPECT_NE(opened.nvml, nullptr) << opened.failure;
    return std::move(opened.nvml);
  }

  std::string path_;
  void* library_ = nullptr;
  void (*configure_)(const FakeNvmlConfig*) = nullptr;
  int (*open_sessions_)() = nullptr;
  int (*short_calls_)() = nullptr;
  std::unique_ptr<FakeNvmlConfig> config_;
};

TEST_F(FakeNvml, InitFailureIsAReason) {
  config_->init_result = 9;
  configure_(config_.get());
  const NvmlOpenResult opened = Nvml::open(path_.c_str());
  EXPECT_EQ(opened.nvml, nullptr);
  EXPECT_EQ(opened.failure, "nvmlInit failed: Driver Not Loaded");
  EXPECT_EQ(open_sessions_(), 0);
}

TEST_F(FakeNvml, DestructorShutsDown) {
  {
    const std::unique_ptr<Nvml> nvml = open();
    EXPECT_EQ(open_sessions_(), 1);
  }
  EXPECT_EQ(open_sessions_(), 0);
}

TEST_F(FakeNvml, DriverAndDevices) {
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  EXPECT_EQ(nvml->driver_version(), "999.99.99-fake");
  EXPECT_EQ(nvml->device_count(), 1u);
  const std::vector<GpuDevice> devices = nvml->devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].index, 0u);
  EXPECT_EQ(devices[0].name, "Fake GPU 80GB");
  EXPECT_EQ(devices[0].uuid, "GPU-00000000-1111-2222-3333-444444444444");
  EXPECT_EQ(devices[0].total, 80ull << 30);
  EXPECT_EQ(devices[0].free, 70ull << 30);
  EXPECT_EQ(devices[0].used, 10ull << 30);
}

TEST_F(FakeNvml, BadIndexNamesTheCall) {
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  try {
    nvml->processes(5);
    FAIL() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::nvml_failed);
    EXPECT_STREQ(error.what(), "nvmlDeviceGetHandleByIndex_v2(device 5) failed: Invalid Argument");
  }
}

// The same lists through each version's struct layout.
TEST_F(FakeNvml, ProcessesThroughEveryListVersion) {
  add_compute(100, 1024 * MiB);
  add_compute(200, not_available);
  add_graphics(100, 1024 * MiB);
  add_graphics(300, 10 * MiB);
  const std::vector<GpuProcess> expected = {
      {100, 1024 * MiB, false}, {200, std::nullopt, false}, {300, 10 * MiB, true}};
  for (int version : {3, 2, 1}) {
    config_->newest_list_version = version;
    const std::unique_ptr<Nvml> nvml = open();
    ASSERT_TRUE(nvml);
    EXPECT_EQ(nvml->processes(0), expected) << "list version " << version;
  }
}

TEST_F(FakeNvml, GrowsTheArrayForManyProcesses) {
  for (unsigned pid = 1; pid <= 150; ++pid) add_compute(pid, pid * MiB);
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  const std::vector<GpuProcess> processes = nvml->processes(0);
  ASSERT_EQ(processes.size(), 150u);
  EXPECT_EQ(processes[149], (GpuProcess{150, 150 * MiB, false}));
  EXPECT_GE(short_calls_(), 1);
}

TEST_F(FakeNvml, KeepsUpWithProcessesStartingBetweenCalls) {
  for (unsigned pid = 1; pid <= 70; ++pid) add_compute(pid, MiB);
  config_->compute_growth_per_short_call = 10;
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  EXPECT_EQ(nvml->processes(0).size(), 80u);
}

TEST_F(FakeNvml, GivesUpOnAListThatNeverStopsGrowing) {
  for (unsigned pid = 1; pid <= 70; ++pid) add_compute(pid, MiB);
  config_->compute_growth_per_short_call = 100;
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  try {
    nvml->processes(0);
    FAIL() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_EQ(error.cause(), ProbeError::Cause::nvml_failed);
    EXPECT_STREQ(error.what(), "nvmlDeviceGetComputeRunningProcesses_v3(device 0) failed: Insufficient Size");
  }
}

TEST_F(FakeNvml, GraphicsListNotSupportedLeavesCompute) {
  add_compute(100, 5 * MiB);
  config_->graphics_result = 3;  // NVML_ERROR_NOT_SUPPORTED
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  EXPECT_EQ(nvml->processes(0), (std::vector<GpuProcess>{{100, 5 * MiB, false}}));
}

TEST_F(FakeNvml, ComputeListErrorIsThrown) {
  config_->newest_list_version = 0;  // every version answers FUNCTION_NOT_FOUND
  const std::unique_ptr<Nvml> nvml = open();
  ASSERT_TRUE(nvml);
  try {
    nvml->processes(0);
    FAIL() << "no exception";
  } catch (const ProbeError& error) {
    EXPECT_STREQ(error.what(), "nvmlDeviceGetComputeRunningProcesses(device 0) failed: Function Not Found");
  }
}

// ---- a real GPU, where there is one ----

// The CUDA driver API, looked up by name as the worker's torch would load it.
struct CudaDriver {
  void* library = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*primary_ctx_retain)(void**, int) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*mem_alloc)(unsigned long long*, size_t) = nullptr;

  bool load() {
    library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return false;
    init = reinterpret_cast<decltype(init)>(::dlsym(library, "cuInit"));
    device_get = reinterpret_cast<decltype(device_get)>(::dlsym(library, "cuDeviceGet"));
    primary_ctx_retain = reinterpret_cast<decltype(primary_ctx_retain)>(::dlsym(library, "cuDevicePrimaryCtxRetain"));
    ctx_set_current = reinterpret_cast<decltype(ctx_set_current)>(::dlsym(library, "cuCtxSetCurrent"));
    mem_alloc = reinterpret_cast<decltype(mem_alloc)>(::dlsym(library, "cuMemAlloc_v2"));
    return init && device_get && primary_ctx_retain && ctx_set_current && mem_alloc;
  }
};

// A child opens a CUDA context and holds 256 MiB on device 0, as a worker would. NVML must list
// it with at least that much, or (another pid namespace) the device's free memory must show it.
TEST(NvmlOnGpu, SeesAChildsContext) {
  constexpr size_t held = 256 * MiB;
  testing::ChildProcess child([](char command) -> char {
    if (command != 'c') return 'r';
    CudaDriver cuda;
    if (!cuda.load()) return 'n';
    int device = 0;
    void* context = nullptr;
    unsigned long long pointer = 0;
    if (cuda.init(0) != 0 || cuda.device_get(&device, 0) != 0 || cuda.primary_ctx_retain(&context, device) != 0 ||
        cuda.ctx_set_current(context) != 0 || cuda.mem_alloc(&pointer, held) != 0) {
      return 'e';
    }
    return 'y';
  });
  ASSERT_EQ(child.ask('?'), 'r');

  const NvmlOpenResult opened = Nvml::open();
  if (!opened.nvml) GTEST_SKIP() << opened.failure;
  const Nvml& nvml = *opened.nvml;
  ASSERT_GE(nvml.device_count(), 1u);
  const GpuDevice before = nvml.device(0);
  std::cout << "driver " << nvml.driver_version() << ", device 0: " << before.name << " " << before.uuid << ", "
            << before.total / MiB << " MiB total, " << before.free / MiB << " MiB free\n";

  const char created = child.ask('c');
  if (created == 'n') GTEST_SKIP() << "no libcuda.so.1";
  ASSERT_EQ(created, 'y') << "the child could not open a CUDA context";

  const GpuDevice after = nvml.device(0);
  const std::vector<GpuProcess> listed = nvml.processes(0);
  const uint64_t free_drop = before.free > after.free ? before.free - after.free : 0;
  std::cout << "free dropped by " << free_drop / MiB << " MiB; NVML lists " << listed.size() << " process(es):";
  for (const GpuProcess& p : listed) {
    std::cout << " " << p.pid << (p.graphics ? "(G)" : "(C)") << "="
              << (p.used ? std::to_string(*p.used / MiB) + "MiB" : std::string("n/a"));
  }
  std::cout << "\n";
  EXPECT_GE(free_drop, held);

  const std::vector<VramSource> sources = attribute_vram(listed, {{child.pid(), true}});
  ASSERT_EQ(sources.size(), 1u);
  if (sources[0].attribution == VramAttribution::nvml_pid) {
    EXPECT_GE(*sources[0].nvml_used, held);
    std::cout << "child " << child.pid() << " attributed by NVML pid: " << *sources[0].nvml_used / MiB << " MiB\n";
  } else {
    EXPECT_EQ(sources[0].attribution, VramAttribution::device_free_drop);
    std::cout << "child " << child.pid() << " not visible by pid: attribute by device free drop\n";
  }
}

}  // namespace
}  // namespace isohost::probe
