// Remote sources against real servers on loopback (tests/python/remote_sources.py): nginx
// standing up a model hub in the Hugging Face layout (revision and tree API, resolve/COMMIT
// with X-Linked-Etag and a redirect of shards to a second origin) and a fault-injecting server
// for what nginx will not do. Each case starts and stops its own servers, and leaves no process
// and no temporary file behind (run_isolated_python).
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace qrepack::testing {
namespace {

class RemoteSources : public ::testing::TestWithParam<const char*> {};

TEST_P(RemoteSources, Case) { expect_script_case("remote_sources.py", GetParam()); }

// Same output as from a local copy, headers only for inspect, revisions, the token kept on the
// hub's origin; hash failures, transparent retries, hard failures and hostile answers; kill -9
// and --resume.
INSTANTIATE_TEST_SUITE_P(
    Hub, RemoteSources,
    ::testing::Values("inspect_hf", "convert_hf_equals_local", "convert_plain_https",
                      "revision_tag", "corrupt_shard", "token_not_forwarded", "reset_mid_body",
                      "status_429_then_ok", "short_body", "status_500_always", "stall_body",
                      "stall_body_always", "lying_content_range", "corrupt_body", "redirect_loop",
                      "gzip_body", "huge_header", "redirect_other_origin", "kill_resume",
                      "corrupt_resume", "other_commands", "container_qwen36", "container_llama"),
    [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace qrepack::testing
