// Nothing make demo's loopback hub starts outlives it (tests/python/leftovers.py runs
// scripts/demo-hub.sh and ends it normally, by SIGKILL of the script, by Ctrl-C and by SIGKILL
// of the hub's wrapper); the run is itself checked for processes and files left behind.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace qrepack::testing {
namespace {

class DemoHubLeftovers : public ::testing::TestWithParam<const char*> {};

TEST_P(DemoHubLeftovers, NothingLeft) { expect_script_case("leftovers.py", GetParam()); }

INSTANTIATE_TEST_SUITE_P(Exits, DemoHubLeftovers,
                         ::testing::Values("normal", "script_kill", "interrupt", "wrapper_kill"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace qrepack::testing
