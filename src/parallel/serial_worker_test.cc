#include "qrepack/parallel/serial_worker.h"

#include <gtest/gtest.h>

#include <vector>

namespace qrepack {
namespace {

TEST(SerialWorker, RunsTasksInSubmissionOrder) {
  std::vector<int> order;
  {
    SerialWorker w;
    for (int i = 0; i < 100; ++i) {
      w.submit([&order, i] {
        order.push_back(i);
        return ok_status();
      });
    }
    EXPECT_TRUE(w.wait_all().ok());
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(SerialWorker, AFailureSkipsLaterTasksAndIsReportedByEveryWait) {
  SerialWorker w;
  int ran = 0;
  const auto t1 = w.submit([&] {
    ++ran;
    return ok_status();
  });
  EXPECT_TRUE(w.wait(t1).ok());
  const auto t2 = w.submit([] { return Status(Error(ErrorKind::kIoWrite, "disk full")); });
  const auto t3 = w.submit([&] {
    ++ran;
    return ok_status();
  });
  const Status s2 = w.wait(t2);
  ASSERT_FALSE(s2.ok());
  EXPECT_EQ(s2.error().kind(), ErrorKind::kIoWrite);
  EXPECT_FALSE(w.wait(t3).ok());
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace qrepack
