// The admission driver's rounds without Python and without waiting: a fake pool (AdmissionSteps)
// hands it books it changes as steps are taken, and time moves only when the loop has nothing
// left to do (ManualClock), so the line, the rounds, the polls and the requests set aside are
// tested on their own, beside the real-process tests in vram_admission_test.cpp.

#include "pool/admission_driver.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "memory/memory_fixtures.hpp"

namespace isohost::pool {
namespace {

using memory::mib;
using memory::testing::snapshot_of;
using memory::testing::WorkerRow;
using namespace std::chrono_literals;

// A pool of rows: a release frees a worker's cache, a reap all its VRAM; a worker marked `refuses`
// has started a call since the plan (begin_step says no); `answer_later` keeps a step's answer
// until told.
class FakePool : public AdmissionSteps {
 public:
  FakePool(std::vector<WorkerRow> rows, memory::Bytes free_mib)
      : rows_(std::move(rows)), free_mib_(free_mib) {}

  void measure(std::function<void(PoolStatus)> done) override {
    ++measured;
    PoolStatus status;
    status.snapshot = snapshot_of(rows_, free_mib_);
    done(std::move(status));
  }

  Begun begin_step(const memory::AdmissionStep& step, const std::string& for_env,
                   const std::string& /*why*/, StepDone done) override {
    steps.push_back(std::string(memory::to_string(step.kind)) + " " + step.worker_id + " for " +
                    for_env);
    if (refuses.contains(step.worker_id)) return {};
    for (auto it = rows_.begin(); it != rows_.end(); ++it) {
      if (it->id != step.worker_id) continue;
      if (step.kind == memory::StepKind::reap) {
        free_mib_ += it->context_mib + it->held_mib + it->cache_mib;
        rows_.erase(it);
        return {.begun = true};  // no answer comes; its end is at once
      }
      free_mib_ += it->cache_mib;
      it->cache_mib = 0;
      break;
    }
    if (answer_later) {
      held.push_back(std::move(done));
    } else {
      done(true, {});
    }
    return {.begun = true};
  }

  void note_refusal(const std::string& env) override { ++refusals[env]; }

  void set_state(const std::string& id, memory::WorkerState state) {
    for (auto& row : rows_) {
      if (row.id == id) row.state = state;
    }
  }

  int measured = 0;
  std::vector<std::string> steps;
  std::set<std::string> refuses;
  bool answer_later = false;
  std::vector<StepDone> held;
  std::map<std::string, int> refusals;

 private:
  std::vector<WorkerRow> rows_;
  memory::Bytes free_mib_;
};

class AdmissionDriverTest : public ::testing::Test {
 protected:
  // A request of the embedding host (no worker to watch, no grant booked) for `need_mib`.
  std::shared_ptr<Admission> ask(AdmissionDriver& driver, memory::Bytes need_mib,
                                 std::vector<nlohmann::ordered_json>& answers) {
    auto job = std::make_shared<Admission>(Admission{
        .env = "host" + std::to_string(answers.size()),
        .for_host = true,
        .bytes = mib(need_mib),
        .asked_at = clock.now(),
        .answer = [&answers](nlohmann::ordered_json a) { answers.push_back(std::move(a)); }});
    driver.ask(job);
    return job;
  }

  // Runs the loop until `count` answers are in; whenever it has nothing to do, lets the
  // driver's shortest poll (10 ms) pass. Fails after an hour of the driver's time.
  void run_until(const std::vector<nlohmann::ordered_json>& answers, std::size_t count) {
    const auto give_up = clock.now() + 1h;
    while (answers.size() < count) {
      ASSERT_LT(clock.now(), give_up) << "the driver stopped with " << answers.size() << " answers";
      if (run_ready() == 0) clock.advance(10ms);
    }
  }
  std::size_t run_ready() {
    io.restart();
    return io.poll();
  }

  // Two requests of the host: the first (2000 MiB) needs a release whose answer `pool` holds
  // back; the second (100 MiB) fits, but waits its turn. Returns once the release has begun.
  void ask_two_behind_a_held_release(FakePool& pool, AdmissionDriver& driver,
                                     std::vector<nlohmann::ordered_json>& answers) {
    pool.answer_later = true;
    ask(driver, 2000, answers);
    ask(driver, 100, answers);
    run_ready();
    ASSERT_EQ(pool.held.size(), 1u) << "no step began";
  }

  ManualClock clock;
  asio::io_context io;
  HostSettings host;
};

TEST_F(AdmissionDriverTest, GrantsWhatFitsWithoutAStep) {
  FakePool pool({{.id = "a", .held_mib = 1000}}, 10000);
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask(driver, 2000, answers);
  run_until(answers, 1);
  EXPECT_EQ(answers[0]["outcome"], "grant") << answers[0].dump();
  EXPECT_TRUE(pool.steps.empty());
  EXPECT_TRUE(answers[0]["grant"].is_null()) << "the host's own load is not booked";
}

TEST_F(AdmissionDriverTest, ReleasesAnIdleCacheThenPlansAgainAndGrants) {
  FakePool pool({{.id = "a", .held_mib = 100, .cache_mib = 3000}}, 1000);
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask(driver, 2000, answers);
  run_until(answers, 1);
  EXPECT_EQ(answers[0]["outcome"], "release_then_grant") << answers[0].dump();
  EXPECT_EQ(pool.steps, std::vector<std::string>{"release a for host0"});
  EXPECT_EQ(answers[0]["steps"], nlohmann::ordered_json::array({"released 'a'"}));
  EXPECT_EQ(answers[0]["plans"].size(), 1u);
  EXPECT_EQ(pool.measured, 2) << "one plan before the step, one after";
}

TEST_F(AdmissionDriverTest, OneRequestAtATimeInOrder) {
  FakePool pool({{.id = "a", .held_mib = 100, .cache_mib = 3000}}, 1000);
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask_two_behind_a_held_release(pool, driver, answers);
  clock.advance(1h);
  run_ready();
  EXPECT_TRUE(answers.empty()) << "the second was decided while the first's step was out";
  pool.held.front()(true, {});
  run_until(answers, 2);
  EXPECT_EQ(answers[0]["bytes"], mib(2000));
  EXPECT_EQ(answers[1]["bytes"], mib(100));
}

TEST_F(AdmissionDriverTest, ARequestWaitingForBusyWorkersStepsAsideForLaterOnes) {
  FakePool pool({{.id = "busy", .state = memory::WorkerState::busy, .held_mib = 20000}}, 3000);
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask(driver, 10000, answers);  // only the busy worker's memory would make room: it waits
  ask(driver, 1000, answers);   // fits: decided meanwhile
  run_until(answers, 1);
  EXPECT_EQ(answers[0]["bytes"], mib(1000)) << answers[0].dump();
  EXPECT_EQ(answers[0]["outcome"], "grant");
  // The busy worker ends its call and turns idle: the waiting request is planned again and
  // makes room with it.
  pool.set_state("busy", memory::WorkerState::idle);
  run_until(answers, 2);
  EXPECT_EQ(answers[1]["bytes"], mib(10000));
  EXPECT_TRUE(answers[1]["granted"].get<bool>()) << answers[1].dump();
}

TEST_F(AdmissionDriverTest, ARequestSetAsideIsPlannedAgainAtEachPollAndNotBefore) {
  FakePool pool({{.id = "busy", .state = memory::WorkerState::busy, .held_mib = 20000}}, 3000);
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask(driver, 10000, answers);
  run_ready();
  ASSERT_EQ(pool.measured, 1);
  clock.advance(99ms);
  run_ready();
  EXPECT_EQ(pool.measured, 1) << "planned again before its poll";
  clock.advance(1ms);
  run_ready();
  EXPECT_EQ(pool.measured, 2);
  clock.advance(100ms);
  run_ready();
  EXPECT_EQ(pool.measured, 3);
  EXPECT_TRUE(answers.empty());
}

TEST_F(AdmissionDriverTest, AWorkerThatCanNoLongerTakeItsStepEndsInARefusalAfterTheRounds) {
  FakePool pool({{.id = "a", .held_mib = 100, .cache_mib = 3000}}, 1000);
  pool.refuses.insert("a");  // it started a call after each plan was made
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask(driver, 2000, answers);
  run_until(answers, 1);
  EXPECT_EQ(answers[0]["outcome"], "refuse") << answers[0].dump();
  EXPECT_EQ(pool.steps.size(), 6u) << "one try a round, six rounds";
  EXPECT_EQ(pool.refusals["host0"], 1);
}

TEST_F(AdmissionDriverTest, StopDropsWhatWaitsAndDecidesNothingMore) {
  FakePool pool({{.id = "a", .held_mib = 100, .cache_mib = 3000}}, 1000);
  AdmissionDriver driver(io, clock, pool, host);
  std::vector<nlohmann::ordered_json> answers;
  ask_two_behind_a_held_release(pool, driver, answers);
  driver.stop();
  pool.held.front()(true, {});
  run_ready();
  clock.advance(1h);
  run_ready();
  EXPECT_TRUE(answers.empty());
  EXPECT_EQ(clock.pending(), 0u) << "the driver set an alarm after it stopped";
}

}  // namespace
}  // namespace isohost::pool
