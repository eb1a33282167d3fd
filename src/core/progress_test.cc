#include "qrepack/core/progress.h"

#include <gtest/gtest.h>

namespace qrepack {
namespace {

TEST(Progress, RenderShowsShareBytesRateAndEta) {
  // 40 MB of 80 MB in 2 s: 0.02 GB/s, 40 MB left at that rate is 2 s.
  EXPECT_EQ(ProgressLine::render("layer.q", 40'000'000, 80'000'000, 2.0),
            " 50.0% 40.0 MB/80.0 MB  0.02 GB/s  ETA 2 s  layer.q");
  // 1.5 GB of 4 GB in 10 s: 0.15 GB/s, 2.5 GB left is 16.7 s.
  EXPECT_EQ(ProgressLine::render("t", 1'500'000'000, 4'000'000'000, 10.0),
            " 37.5% 1.50 GB/4.00 GB  0.15 GB/s  ETA 17 s  t");
  // Long jobs: 100 MB of 100 GB at 1 MB/s leaves 99900 s = 27 h 45 min.
  EXPECT_EQ(ProgressLine::render("t", 100'000'000, 100'000'000'000, 100.0),
            "  0.1% 100.0 MB/100.00 GB  0.00 GB/s  ETA 27 h 45 min  t");
  // 125 s is 2 min 05 s.
  EXPECT_EQ(ProgressLine::render("t", 1'000'000, 126'000'000, 1.0),
            "  0.8% 1.0 MB/126.0 MB  0.00 GB/s  ETA 2 min 05 s  t");
  EXPECT_EQ(ProgressLine::render("t", 0, 10, 0.0), "  0.0% 0.0 MB/0.0 MB  0.00 GB/s  ETA -  t");
}

TEST(Progress, NeverModePrintsNothing) {
  ProgressLine p(100, ProgressMode::kNever);
  EXPECT_FALSE(p.enabled());
  ::testing::internal::CaptureStderr();
  p.update("x", 50);
  p.finish();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(Progress, AlwaysModeRewritesOneLineAndEndsIt) {
  ::testing::internal::CaptureStderr();
  {
    ProgressLine p(100, ProgressMode::kAlways);
    p.update("x", 100);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.front(), '\r');
  EXPECT_EQ(err.back(), '\n');
  EXPECT_NE(err.find("100.0%"), std::string::npos) << err;
}

}  // namespace
}  // namespace qrepack
