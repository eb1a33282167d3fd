#include "qrepack/parallel/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace qrepack {
namespace {

class ParallelFor : public ::testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override { set_thread_count(GetParam()); }
  void TearDown() override { set_thread_count(0); }
};

TEST_P(ParallelFor, CoversEveryIndexExactlyOnceWithValidWorkers) {
  EXPECT_EQ(thread_count(), GetParam());
  for (std::size_t n : {0u, 1u, 2u, 7u, 1000u, 100003u}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<bool> bad_worker{false};
    parallel_for(n, 1, [&](std::size_t b, std::size_t e, std::size_t w) {
      if (w >= thread_count()) bad_worker = true;
      for (std::size_t i = b; i < e; ++i) hits[i]++;
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
    EXPECT_FALSE(bad_worker);
  }
}

TEST_P(ParallelFor, RangesAreContiguousDeterministicAndRespectMinChunk) {
  auto ranges = [](std::size_t n, std::size_t min_chunk) {
    std::mutex mu;
    std::set<std::pair<std::size_t, std::size_t>> r;
    parallel_for(n, min_chunk, [&](std::size_t b, std::size_t e, std::size_t) {
      std::lock_guard lock(mu);
      r.insert({b, e});
    });
    return r;
  };
  const auto a = ranges(1000, 1), b = ranges(1000, 1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), std::min<std::size_t>(GetParam(), 1000));
  std::size_t expect_begin = 0;
  for (const auto& [begin, end] : a) {
    EXPECT_EQ(begin, expect_begin);
    expect_begin = end;
  }
  EXPECT_EQ(expect_begin, 1000u);
  EXPECT_EQ(ranges(10, 100).size(), 1u);  // too little work to split
}

TEST_P(ParallelFor, ManySmallJobsInARow) {
  std::atomic<std::size_t> sum{0};
  for (int j = 0; j < 2000; ++j) {
    parallel_for(8, 1, [&](std::size_t b, std::size_t e, std::size_t) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 16000u);
}

INSTANTIATE_TEST_SUITE_P(Threads, ParallelFor, ::testing::Values(1, 2, 3, 8));

}  // namespace
}  // namespace qrepack
