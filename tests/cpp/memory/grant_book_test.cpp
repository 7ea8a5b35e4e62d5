// Grants: what is promised stays promised until used, returned, or expired, so two requests
// decided one after the other are never both granted the same bytes.

#include "memory/grant_book.hpp"

#include <gtest/gtest.h>

#include "memory/admission.hpp"
#include "memory_fixtures.hpp"

namespace isohost::memory {
namespace {

using testing::at;
using testing::request_for;
using testing::snapshot_of;
using enum AdmissionOutcome;

TEST(GrantBook, AddSettleAndPending) {
  GrantBook book;
  const GrantId first = book.add("a", 0, mib(1000), at(0));
  const GrantId second = book.add("b", 0, mib(500), at(1));
  book.add("c", 1, mib(700), at(2));
  EXPECT_NE(first, second);
  EXPECT_EQ(book.pending_on(0), mib(1500));
  EXPECT_EQ(book.pending_on(1), mib(700));
  EXPECT_TRUE(book.settle(first));
  EXPECT_FALSE(book.settle(first));  // once only
  EXPECT_EQ(book.pending_on(0), mib(500));
  EXPECT_EQ(book.outstanding().size(), 2u);
}

TEST(GrantBook, IdsAreNeverReused) {
  GrantBook book;
  const GrantId first = book.add("a", 0, 1, at(0));
  book.settle(first);
  EXPECT_GT(book.add("a", 0, 1, at(0)), first);
}

TEST(GrantBook, ExpiresGrantsOlderThanTheLifetime) {
  GrantBook book;
  const GrantId old_grant = book.add("a", 0, mib(1000), at(0));
  const GrantId new_grant = book.add("b", 0, mib(500), at(30));
  EXPECT_TRUE(book.expire(at(59), std::chrono::seconds(60)).empty());

  const std::vector<PendingGrant> expired = book.expire(at(60), std::chrono::seconds(60));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, old_grant);
  EXPECT_EQ(expired[0].requester, "a");
  EXPECT_EQ(expired[0].bytes, mib(1000));
  EXPECT_EQ(book.pending_on(0), mib(500));
  EXPECT_FALSE(book.settle(old_grant));  // already returned: settling late is harmless
  EXPECT_TRUE(book.settle(new_grant));
}

TEST(GrantBook, DropsTheGrantsOfAWorkerThatEnded) {
  GrantBook book;
  book.add("a", 0, mib(1000), at(0));
  book.add("a", 1, mib(1000), at(0));
  book.add("b", 0, mib(500), at(0));
  EXPECT_EQ(book.drop_worker("a"), 2u);
  EXPECT_EQ(book.pending_on(0), mib(500));
  EXPECT_EQ(book.pending_on(1), 0u);
}

// Two requests of 2000 MiB with 2488 MiB grantable: each alone fits, both do not.
TEST(Admit, TwoConcurrentRequestsAreNeverGrantedTheSameBytes) {
  const Snapshot snapshot = snapshot_of({}, 3000);  // NVML has not seen either allocation
  GrantBook book;

  const AdmissionPlan first = admit(snapshot, request_for(2000, "a"), book);
  const AdmissionPlan second = admit(snapshot, request_for(2000, "b"), book);

  EXPECT_EQ(first.outcome, grant) << first.explain();
  ASSERT_TRUE(first.grant_id.has_value());
  EXPECT_EQ(second.outcome, refuse) << second.explain();
  EXPECT_FALSE(second.grant_id.has_value());
  EXPECT_EQ(second.pending, mib(2000));
  EXPECT_EQ(second.grantable, mib(488));
  EXPECT_NE(second.explain().find("pending 2000 MiB = 488 MiB grantable"), std::string::npos)
      << second.explain();
  EXPECT_EQ(book.pending_on(0), mib(2000));
}

TEST(Admit, SecondRequestMakesItsOwnRoomInsteadOfSharing) {
  const Snapshot snapshot = snapshot_of({{.id = "idle", .cache_mib = 3000}}, 3000);
  GrantBook book;
  const AdmissionPlan first = admit(snapshot, request_for(2000, "a"), book);
  const AdmissionPlan second = admit(snapshot, request_for(2000, "b"), book);
  EXPECT_EQ(first.outcome, grant);
  EXPECT_EQ(second.outcome, release_then_grant) << second.explain();
  EXPECT_EQ(book.pending_on(0), mib(4000));  // both booked, the second against the release
}

TEST(Admit, AStepPlanIsBookedWhenDecided) {
  const Snapshot snapshot = snapshot_of({{.id = "b", .held_mib = 3000}}, 1200);
  GrantBook book;
  const AdmissionPlan plan = admit(snapshot, request_for(2000, "a"), book);
  EXPECT_EQ(plan.outcome, reap_then_grant);
  ASSERT_TRUE(plan.grant_id.has_value());
  ASSERT_EQ(book.outstanding().size(), 1u);
  EXPECT_EQ(book.outstanding()[0].id, *plan.grant_id);
  EXPECT_EQ(book.outstanding()[0].requester, "a");
  EXPECT_EQ(book.outstanding()[0].granted_at, testing::kNow);
}

TEST(Admit, WaitAndRefuseBookNothing) {
  GrantBook book;
  const Snapshot busy =
      snapshot_of({{.id = "p", .state = WorkerState::busy, .held_mib = 5000}}, 1200);
  EXPECT_EQ(admit(busy, request_for(3000, "a"), book).outcome, wait);
  EXPECT_EQ(admit(busy, request_for(30000, "a"), book).outcome, refuse);
  EXPECT_TRUE(book.outstanding().empty());
}

TEST(Admit, UsesTheBookNotTheSnapshotsPendingList) {
  Snapshot snapshot = snapshot_of({}, 3000);
  snapshot.pending = {{.id = 99, .device = 0, .bytes = mib(2400)}};  // stale: the book rules
  GrantBook book;
  EXPECT_EQ(admit(snapshot, request_for(2000, "a"), book).outcome, grant);
}

// A grant never used is returned, and its bytes can be granted again.
TEST(Admit, ExpiredGrantIsReturnedAndGrantableAgain) {
  GrantBook book;
  Snapshot snapshot = snapshot_of({}, 3000);
  ASSERT_EQ(admit(snapshot, request_for(2000, "a"), book).outcome, grant);
  ASSERT_EQ(admit(snapshot, request_for(2000, "b"), book).outcome, refuse);

  snapshot.taken_at = testing::kNow + snapshot.settings.grant_lifetime;
  const std::vector<PendingGrant> returned =
      book.expire(snapshot.taken_at, snapshot.settings.grant_lifetime);
  ASSERT_EQ(returned.size(), 1u);
  EXPECT_EQ(returned[0].requester, "a");

  EXPECT_EQ(admit(snapshot, request_for(2000, "b"), book).outcome, grant);
}

// Settled: the bytes are now in NVML's used figure, so free has dropped by them instead.
TEST(Admit, SettledGrantIsCountedByNvmlInstead) {
  GrantBook book;
  const AdmissionPlan first = admit(snapshot_of({}, 3000), request_for(2000, "a"), book);
  book.settle(*first.grant_id);
  const Snapshot after =
      snapshot_of({{.id = "a", .state = WorkerState::busy, .held_mib = 2000}}, 1000);
  const AdmissionPlan second = admit(after, request_for(400, "b"), book);
  EXPECT_EQ(second.pending, 0u);
  EXPECT_EQ(second.grantable, mib(488));
  EXPECT_EQ(second.outcome, grant);
}

}  // namespace
}  // namespace isohost::memory
