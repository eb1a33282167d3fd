#include "qrepack/parallel/ordered_pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "qrepack/parallel/parallel_for.h"

namespace qrepack {
namespace {

class OrderedPipeline : public ::testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override { set_thread_count(GetParam()); }
  void TearDown() override { set_thread_count(0); }
};

// Each job writes its number into its slot; consume checks the slot still holds it (no other
// job reused the slot before the consumer got there) and records the order.
TEST_P(OrderedPipeline, ConsumesEveryJobOnceInOrderFromItsOwnSlot) {
  for (std::size_t slots : {1u, 2u, 3u, 7u}) {
    for (std::size_t jobs : {1u, 2u, 5u, 1000u}) {
      std::vector<std::size_t> slot_job(slots, ~std::size_t{0});
      std::vector<std::atomic<int>> in_flight(slots);
      std::vector<std::size_t> order;
      std::atomic<bool> overlap{false}, bad_worker{false};
      auto st = ordered_pipeline(
          jobs, slots,
          [&](std::size_t j, std::size_t s, std::size_t w) -> Status {
            if (s != j % slots) overlap = true;
            if (w >= thread_count()) bad_worker = true;
            if (in_flight[s].fetch_add(1) != 0) overlap = true;
            if (j % 7 == 3) std::this_thread::yield();  // uneven job lengths
            slot_job[s] = j;
            in_flight[s].fetch_sub(1);
            return ok_status();
          },
          [&](std::size_t j, std::size_t s) -> Status {
            if (slot_job[s] != j) overlap = true;
            order.push_back(j);
            return ok_status();
          });
      ASSERT_TRUE(st.ok());
      EXPECT_FALSE(overlap) << "slots " << slots << " jobs " << jobs;
      EXPECT_FALSE(bad_worker);
      ASSERT_EQ(order.size(), jobs);
      for (std::size_t j = 0; j < jobs; ++j) ASSERT_EQ(order[j], j);
    }
  }
}

TEST_P(OrderedPipeline, NoJobsCallsNothing) {
  bool called = false;
  auto st = ordered_pipeline(
      0, 4, [&](std::size_t, std::size_t, std::size_t) { return called = true, ok_status(); },
      [&](std::size_t, std::size_t) { return called = true, ok_status(); });
  EXPECT_TRUE(st.ok());
  EXPECT_FALSE(called);
}

// The first failure in job order wins, whichever thread hit a later one first.
TEST_P(OrderedPipeline, ReturnsTheFirstFailureInJobOrderAndConsumesNothingAfterIt) {
  for (bool fail_in_consume : {false, true}) {
    std::vector<std::size_t> consumed;
    auto st = ordered_pipeline(
        200, 5,
        [&](std::size_t j, std::size_t, std::size_t) -> Status {
          if (!fail_in_consume && (j == 41 || j == 42 || j == 150)) {
            return Error(ErrorKind::kIoRead, "job " + std::to_string(j));
          }
          return ok_status();
        },
        [&](std::size_t j, std::size_t) -> Status {
          if (fail_in_consume && j == 41) return Error(ErrorKind::kIoWrite, "job 41");
          consumed.push_back(j);
          return ok_status();
        });
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().kind(), fail_in_consume ? ErrorKind::kIoWrite : ErrorKind::kIoRead);
    EXPECT_NE(st.error().to_string().find("job 41"), std::string::npos) << st.error().to_string();
    ASSERT_EQ(consumed.size(), 41u);
    EXPECT_EQ(consumed.back(), 40u);
  }
}

TEST_P(OrderedPipeline, TheCallingThreadConsumes) {
  const auto caller = std::this_thread::get_id();
  bool elsewhere = false;
  auto st = ordered_pipeline(
      100, 3, [](std::size_t, std::size_t, std::size_t) { return ok_status(); },
      [&](std::size_t, std::size_t) {
        elsewhere = elsewhere || std::this_thread::get_id() != caller;
        return ok_status();
      });
  EXPECT_TRUE(st.ok());
  EXPECT_FALSE(elsewhere);
}

INSTANTIATE_TEST_SUITE_P(Threads, OrderedPipeline, ::testing::Values(1, 2, 3, 8));

}  // namespace
}  // namespace qrepack
