// `isohost top`'s frames from fixed host answers: rows, bars, rates, widths, a machine without GPU.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cli/top_frame.hpp"

namespace isohost::cli::top {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kMiB = 1048576.0;

// A metrics answer with one ready worker of env "a", a zygote of env "z" and one device.
nlohmann::ordered_json metrics(double calls = 12, double uptime = 100) {
  auto status = nlohmann::ordered_json::parse(R"({
    "host": {"pid": 1000, "pss": 20000000},
    "workers": [{"env": "a", "pid": 4242, "generation": 3, "state": "ready", "idle_seconds": 4.5,
                 "calls": 7, "pss": 643000000, "private": 600000000, "vram": 641728512,
                 "vram_method": "nvml", "fixed_vram": 641728512, "reclaimable_vram": 0}],
    "zygotes": [{"env": "z", "pid": 4100, "state": "ready", "preload": ["numpy"], "forks": 2,
                 "starts": 1, "refusal": null, "pss": 90000000, "private": 80000000}],
    "system_memory": {"total": 64000000000, "available": 48000000000}
  })");
  status["devices"] = {{{"index", 0},
                        {"name", "NVIDIA H200"},
                        {"total", 1000 * kMiB},
                        {"used", 500 * kMiB},
                        {"free", 500 * kMiB},
                        {"foreign", 100 * kMiB},
                        {"workers_vram", 400 * kMiB},
                        {"fixed", 100 * kMiB},
                        {"held", 200 * kMiB},
                        {"reclaimable", 100 * kMiB},
                        {"reserve", 0},
                        {"pending", 0},
                        {"grantable", 500 * kMiB}}};
  nlohmann::ordered_json out{
      {"status", status}, {"uptime_seconds", uptime}, {"sample_age_seconds", 0.4}};
  out["envs"]["a"] = {{"calls", calls}, {"call_errors", 0}, {"crashes", 0},
                      {"starts", 1},    {"releases", 0},    {"last_admission", nullptr}};
  return out;
}

Sample sample(nlohmann::ordered_json m, double at_seconds = 0) {
  return {.metrics = std::move(m),
          .taken_at = Clock::time_point{} + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(at_seconds))};
}

const Row& row_of(const Frame& frame, const std::string& env) {
  const auto it = std::find_if(frame.rows.begin(), frame.rows.end(),
                               [&](const Row& r) { return r.env == env; });
  EXPECT_NE(it, frame.rows.end()) << env;
  return *it;
}

// The header line that draws device 0's bar.
std::string device_bar(const Frame& frame) {
  for (const auto& line : frame.header) {
    const auto text = line_text(line);
    if (text.starts_with("GPU 0")) return text;
  }
  ADD_FAILURE() << "no device bar in\n" << plain_text(frame);
  return "";
}

// The part of `line` between its first '[' and the ']' after it.
std::string bar_cells(const std::string& line) {
  const auto open = line.find('[');
  const auto close = line.find(']', open);
  return open == std::string::npos || close == std::string::npos
             ? ""
             : line.substr(open + 1, close - open - 1);
}

long count(const std::string& s, char c) { return std::count(s.begin(), s.end(), c); }

TEST(TopFrame, WorkerRowShowsWhatIsohostKnowsOfIt) {
  const auto frame = build_frame(nullptr, sample(metrics()), {.width = 160});
  const auto text = line_text(row_of(frame, "a").line);
  EXPECT_EQ(row_of(frame, "a").pid, 4242);
  EXPECT_FALSE(row_of(frame, "a").zygote);
  for (const char* expected : {"a ", "4242", " 3 ", "ready", "643M", "600M", "612Mi", "4.5s"}) {
    EXPECT_THAT(text, HasSubstr(expected));
  }
  EXPECT_THAT(plain_text(frame), HasSubstr("host pid 1000"));
  EXPECT_THAT(plain_text(frame), HasSubstr("up 1m40s"));
  EXPECT_THAT(plain_text(frame), HasSubstr("RAM 16.0G used of 64.0G"));
}

TEST(TopFrame, ZygoteRowSaysWhatItIs) {
  const auto frame = build_frame(nullptr, sample(metrics()), {.width = 160});
  const auto& zygote = row_of(frame, "z");
  EXPECT_TRUE(zygote.zygote);
  EXPECT_THAT(line_text(zygote.line), HasSubstr("z (zygote)"));
  EXPECT_THAT(line_text(zygote.line), HasSubstr("4100"));
  EXPECT_THAT(line_text(zygote.line), HasSubstr("zygote, 2 forks"));
  // Workers first, then zygotes.
  EXPECT_EQ(frame.rows.front().env, "a");
}

TEST(TopFrame, CallsPerSecondFromTheEnvironmentCounterOverTheHostsUptime) {
  const auto before = sample(metrics(10, 100), 0);
  // Arrived 10 s apart here, but the host says 2 s passed: the host's clock wins.
  const auto after = sample(metrics(15, 102), 10);
  const auto frame = build_frame(&before, after, {.width = 160});
  EXPECT_THAT(line_text(row_of(frame, "a").line), HasSubstr(" 2.5 "));
}

TEST(TopFrame, CallsPerSecondFromTheWorkersCountOnAHostWithoutMetrics) {
  auto ps_before = metrics_from_ps(metrics()["status"]);
  auto ps_after = ps_before;
  ps_after["status"]["workers"][0]["calls"] = 11;  // 4 calls in the 2 s between arrivals
  const auto before = sample(ps_before, 1);
  const auto after = sample(ps_after, 3);
  EXPECT_THAT(line_text(row_of(build_frame(&before, after, {.width = 160}), "a").line),
              HasSubstr(" 2.0 "));
  // Another pid is another worker: its count does not continue the old one's.
  ps_after["status"]["workers"][0]["pid"] = 4343;
  const auto other = sample(ps_after, 3);
  EXPECT_THAT(line_text(row_of(build_frame(&before, other, {.width = 160}), "a").line),
              Not(HasSubstr(" 2.0 ")));
}

TEST(TopFrame, NoRateWithoutAPreviousAnswerOrWhenTheCounterWentBack) {
  const auto first = build_frame(nullptr, sample(metrics()), {.width = 160});
  const auto rate_column = line_text(first.columns).find("CALLS/S");
  ASSERT_NE(rate_column, std::string::npos);
  EXPECT_EQ(line_text(row_of(first, "a").line).substr(rate_column, 7), "      -");
  // A host restarted between the two answers counts from 0 again.
  const auto before = sample(metrics(50, 100));
  const auto after = sample(metrics(3, 5));
  const auto frame = build_frame(&before, after, {.width = 160});
  EXPECT_EQ(line_text(row_of(frame, "a").line).substr(rate_column, 7), "      -");
}

TEST(TopFrame, DeviceBarFillsTheWidthInProportion) {
  for (int width : {80, 120, 160}) {
    const auto bar = device_bar(build_frame(nullptr, sample(metrics()), {.width = width}));
    EXPECT_EQ(static_cast<int>(bar.size()), width) << bar;
    const auto cells = bar_cells(bar);
    const double n = static_cast<double>(cells.size());
    // 1000 MiB: fixed 100, held 200, reclaimable 100, foreign 100, free 500.
    EXPECT_NEAR(count(cells, '#'), n * 0.1, 1) << bar;
    EXPECT_NEAR(count(cells, '='), n * 0.2, 1) << bar;
    EXPECT_NEAR(count(cells, '~'), n * 0.1, 1) << bar;
    EXPECT_NEAR(count(cells, 'X'), n * 0.1, 1) << bar;
    EXPECT_NEAR(count(cells, '.'), n * 0.5, 2) << bar;
    EXPECT_THAT(bar, HasSubstr("GPU 0 NVIDIA H200"));
    EXPECT_THAT(bar, HasSubstr("500Mi of 1000Mi used"));
  }
}

TEST(TopFrame, DeviceLegendNamesEverySegment) {
  const auto text = plain_text(build_frame(nullptr, sample(metrics()), {.width = 200}));
  for (const char* expected : {"# fixed 100Mi", "= held 200Mi", "~ reclaimable 100Mi",
                               "X foreign 100Mi", ". free 500Mi", "grantable 500Mi"}) {
    EXPECT_THAT(text, HasSubstr(expected));
  }
  EXPECT_THAT(text, Not(HasSubstr("hibernated")));  // nothing is
}

TEST(TopFrame, HibernatedBytesShowInTheFreeSpaceTheyWouldTakeBack) {
  auto m = metrics();
  auto& w = m["status"]["workers"][0];
  w["state"] = "hibernated";
  w["vram"] = 0;
  w["hibernation"] = {{"vram_moved", 250 * kMiB}, {"ram_grown", 262000000}, {"seconds", 1.5}};
  const auto frame = build_frame(nullptr, sample(m), {.width = 120});
  const auto cells = bar_cells(device_bar(frame));
  EXPECT_NEAR(count(cells, ':'), static_cast<double>(cells.size()) * 0.25, 1);
  EXPECT_NEAR(count(cells, '.'), static_cast<double>(cells.size()) * 0.25, 2);
  EXPECT_THAT(plain_text(frame), HasSubstr(": hibernated 250Mi"));
  EXPECT_THAT(line_text(row_of(frame, "a").line), HasSubstr("hibernated"));
}

TEST(TopFrame, ATinyContextStillGetsACell) {
  auto m = metrics();
  auto& d = m["status"]["devices"][0];
  d["total"] = 143771 * kMiB;
  d["used"] = 612 * kMiB;
  d["foreign"] = 0;
  d["workers_vram"] = 612 * kMiB;
  d["fixed"] = 612 * kMiB;
  d["held"] = 0;
  d["reclaimable"] = 0;
  const auto cells = bar_cells(device_bar(build_frame(nullptr, sample(m), {.width = 100})));
  EXPECT_EQ(count(cells, '#'), 1);
}

TEST(TopFrame, AMachineWithoutGpuSaysSoInOneLine) {
  auto m = metrics();
  m["status"]["devices"] = nlohmann::ordered_json::array();
  m["status"]["gpu"] = "no NVIDIA driver (libnvidia-ml.so.1 not found)";
  const auto text = plain_text(build_frame(nullptr, sample(m), {.width = 160}));
  EXPECT_THAT(text, HasSubstr("GPU: none (no NVIDIA driver (libnvidia-ml.so.1 not found))\n"));
  EXPECT_THAT(text, Not(HasSubstr("GPU 0")));
  // The rows are still there.
  EXPECT_THAT(text, HasSubstr("4242"));
  m["status"].erase("gpu");
  m["status"]["gpu_unavailable_reason"] = "simulated away";
  EXPECT_THAT(plain_text(build_frame(nullptr, sample(m), {.width = 160})),
              HasSubstr("GPU: none (simulated away)"));
}

TEST(TopFrame, EveryLineFitsTheWidth) {
  auto m = metrics();
  m["status"]["workers"][0]["env"] = "an-environment-with-a-very-long-name-indeed";
  m["envs"]["an-environment-with-a-very-long-name-indeed"]["last_admission"] = {
      {"action", "hibernated"}, {"for", "another-long-environment-name"}, {"seconds_ago", 3.2}};
  for (int width : {1, 20, 40, 80, 100, 120, 160, 250}) {
    const auto frame = build_frame(nullptr, sample(m), {.width = width});
    std::string text = plain_text(frame);
    std::size_t start = 0;
    for (auto end = text.find('\n'); end != std::string::npos;
         start = end + 1, end = text.find('\n', start)) {
      EXPECT_LE(static_cast<int>(end - start), width) << text.substr(start, end - start);
    }
  }
}

TEST(TopFrame, RowBarsWhenThereIsRoomAndNotOtherwise) {
  const auto wide =
      line_text(row_of(build_frame(nullptr, sample(metrics()), {.width = 160}), "a").line);
  EXPECT_EQ(count(wide, '['), 3) << wide;  // PSS, private, VRAM
  // The largest PSS fills its bar; the zygote's PSS, a seventh of it, takes a cell or two.
  EXPECT_THAT(wide, HasSubstr("[||||||||||]"));
  const auto narrow =
      line_text(row_of(build_frame(nullptr, sample(metrics()), {.width = 100}), "a").line);
  EXPECT_EQ(count(narrow, '['), 0) << narrow;
  EXPECT_THAT(narrow, HasSubstr("643M"));
}

TEST(TopFrame, LastAdmissionIsShownOnItsWorkersRow) {
  auto m = metrics();
  m["envs"]["a"]["last_admission"] = {{"action", "released"}, {"for", "b"}, {"seconds_ago", 3.2}};
  const auto frame = build_frame(nullptr, sample(m), {.width = 160});
  EXPECT_THAT(line_text(row_of(frame, "a").line), HasSubstr("released for 'b' 3.2s ago"));
  EXPECT_THAT(line_text(frame.columns), HasSubstr("LAST ADMISSION"));
}

TEST(TopFrame, FieldsOfTheWrongTypeShowAsDashesAndNeverThrow) {
  for (const char* text :
       {R"({})", R"({"status": 7})", R"({"status": {"workers": "x", "devices": {}}})",
        R"({"status": {"workers": [{"env": 1, "pid": "x", "pss": "big"}], "zygotes": [3]},
                               "envs": {"1": {"calls": "many"}}, "uptime_seconds": "long"})"}) {
    const auto m = nlohmann::ordered_json::parse(text);
    const auto before = sample(m);
    EXPECT_NO_THROW({
      const auto frame = build_frame(&before, sample(m, 1), {.width = 120});
      plain_text(frame);
    }) << text;
  }
  const auto frame =
      build_frame(nullptr, sample(nlohmann::ordered_json::parse(R"({})")), {.width = 120});
  EXPECT_THAT(plain_text(frame), HasSubstr("(no workers running)"));
}

TEST(TopFrame, OutcomeOfEachKeySaysWhatHappened) {
  const auto ok = [](nlohmann::ordered_json value) {
    return nlohmann::ordered_json{{"ok", true}, {"value", std::move(value)}};
  };
  EXPECT_EQ(outcome_text("release", "a",
                         ok({{"rss_before", 251000000},
                             {"rss_after", 243000000},
                             {"reserved_before", 1073741824},
                             {"reserved_after", 0},
                             {"seconds", 0.004}})),
            "release 'a': done in 4ms, RSS 251M -> 243M, VRAM cache 1.00Gi -> 0");
  EXPECT_EQ(outcome_text("reap", "a", ok({{"reaped", true}, {"pid", 4242}, {"generation", 1}})),
            "reap 'a': done, pid 4242 (generation 1) ended");
  EXPECT_EQ(
      outcome_text("hibernate", "a", ok({{"hibernated", false}, {"reason", "no CUDA context"}})),
      "hibernate 'a': not done: no CUDA context");
  EXPECT_EQ(outcome_text("wake", "a",
                         ok({{"woken", true}, {"vram_restored", 612 * kMiB}, {"seconds", 2.5}})),
            "wake 'a': done in 2.5s, 612Mi back on the card");
  EXPECT_EQ(
      outcome_text("release", "nope",
                   {{"ok", false},
                    {"error", {{"kind", "UnknownEnvironment"}, {"message", "no env 'nope'"}}}}),
      "release 'nope' failed: UnknownEnvironment: no env 'nope'");
}

TEST(TopFrame, UnitsAsIsohostPsWritesThem) {
  EXPECT_EQ(ram_text(643e6), "643M");
  EXPECT_EQ(ram_text(12.34e9), "12.3G");
  EXPECT_EQ(ram_text(999), "999");
  EXPECT_EQ(vram_text(612 * kMiB), "612Mi");
  EXPECT_EQ(vram_text(1.5 * 1024 * kMiB), "1.50Gi");
  EXPECT_EQ(duration_text(0.004), "4ms");
  EXPECT_EQ(duration_text(0.42), "0.4s");
  EXPECT_EQ(duration_text(42), "42s");
  EXPECT_EQ(duration_text(302), "5m02s");
  EXPECT_EQ(duration_text(3 * 3600 + 7 * 60), "3h07m");
  EXPECT_EQ(duration_text(2 * 86400 + 4 * 3600), "2d04h");
  EXPECT_EQ(duration_text(-1), "-");
}

}  // namespace
}  // namespace isohost::cli::top
