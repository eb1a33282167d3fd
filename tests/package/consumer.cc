// Uses qrepack through its installed library API only: writes the tiny FP8 fixture, converts
// it to int4-g128, and checks the result loads as the engine loads it.
// Usage: qrepack_consumer FIXTURE_DIR OUT_DIR
#include <qrepack/exec/convert.h>
#include <qrepack/fixtures/moe_fp8.h>
#include <qrepack/io/checkpoint.h>
#include <qrepack/plan/convert_plan.h>
#include <qrepack/verify/check_load.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

int fail(const qrepack::Error& e) {
  std::fprintf(stderr, "consumer: %s\n", e.to_string().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: qrepack_consumer FIXTURE_DIR OUT_DIR\n");
    return 2;
  }
  const std::string fixture = argv[1], out = argv[2];
  auto written = qrepack::write_moe_fp8_fixture(fixture, qrepack::MoeFixtureOptions{});
  if (!written.ok()) return fail(written.error());
  auto ck = qrepack::Checkpoint::open(fixture);
  if (!ck.ok()) return fail(ck.error());
  qrepack::ConvertOptions o;  // int4-g128, the engine's default container
  o.progress = qrepack::ProgressMode::kNever;
  auto plan = qrepack::plan_conversion(*ck, o);
  if (!plan.ok()) return fail(plan.error());
  std::filesystem::create_directory(out);
  auto rep = qrepack::execute_conversion(*ck, *plan, o, out, /*resume=*/false);
  if (!rep.ok()) return fail(rep.error());
  auto loaded = qrepack::check_load(out);
  if (!loaded.ok()) return fail(loaded.error());
  if (!loaded->ok()) {
    std::fprintf(stderr, "consumer: check-load found missing or unloadable tensors\n");
    return 1;
  }
  std::printf("consumer: %zu source tensors -> %zu outputs in %zu shard(s); %zu load\n",
              written->tensors, rep->outputs, rep->shards, loaded->checked);
  return 0;
}
