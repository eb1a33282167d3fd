// The engine's format inference (its qt_resolve_fmt and qt_verify_fmt_stamp, as the registry
// docs/FORMATS.md and reference/colibri.md §3.5 describe them), case by case, including every
// collision the registry names.
#include "qrepack/verify/container_format.h"

#include <gtest/gtest.h>

namespace qrepack {
namespace {

using CF = ContainerFormat;

std::string resolved(std::uint64_t o, std::uint64_t i, std::uint64_t nb, std::uint64_t ns,
                     const char* stamp = nullptr) {
  const std::string s = stamp ? stamp : "";
  const auto r = resolve_container_format(o, i, nb, ns, stamp ? &s : nullptr);
  return r.ok() ? r->name() : "refused " + std::string(r.error().rule());
}

TEST(ContainerFormat, EachFormatByItsByteCounts) {
  EXPECT_EQ(resolved(4, 10, 40, 16), "int8-row");
  EXPECT_EQ(resolved(4, 10, 20, 16), "int4-row");
  EXPECT_EQ(resolved(4, 10, 12, 16), "int2-row");
  EXPECT_EQ(resolved(4, 256, 512, 4 * 4 * 2), "int4-g128");
  EXPECT_EQ(resolved(4, 256, 512, 4 * 4 * 4), "int4-g64");
  EXPECT_EQ(resolved(4, 100, 4 * 2 * 24, 4 * 2 * 4), "int3-g64");
  EXPECT_EQ(resolved(256, 256, 65536, 2 * 2 * 4), "fp8-e4m3-b128");
  EXPECT_EQ(resolved(2, 256, 2 * 98, 4), "e8-iq3");
}

// Where byte counts coincide, the engine's order decides: row formats before int3-g64, the
// finest group size first, int8-row over fp8 unless stamped.
TEST(ContainerFormat, CollisionsResolveAsTheEngineResolvesThem) {
  // int3-g64 at I = 48 has int4-row's bytes, at I = 24 int8-row's.
  EXPECT_EQ(resolved(4, 48, 4 * 24, 4 * 4), "int4-row");
  EXPECT_EQ(resolved(4, 24, 4 * 24, 4 * 4), "int8-row");
  // int4-g128 over 130 columns has two groups, as g96 has: read as g96.
  EXPECT_EQ(resolved(4, 130, 4 * 65, 4 * 4 * 2), "int4-g96");
  // GLM-5.2's o_proj [6144, 16384]: 48 x 128 blocks = 6144 = O scales, int8-row's count.
  const std::uint64_t o = 6144, i = 16384;
  EXPECT_EQ(resolved(o, i, o * i, o * 4), "int8-row");
  EXPECT_EQ(resolved(o, i, o * i, o * 4, "fp8-e4m3-b128"), "fp8-e4m3-b128");
  EXPECT_EQ(resolved(o, i, o * i, o * 4, "int8-row"), "int8-row");
  EXPECT_EQ(resolved(o, i, o * i, o * 4, "int4-row"), "refused container.fp8_collision");
  // UE8M0 block scales (one byte per block) are recognised and refused.
  EXPECT_EQ(resolved(256, 256, 65536, 4), "refused container.fp8_ue8m0");
  // I = 98, one block: fmt 6's tag and 98-byte rows; also fp8 with one f32 scale, and int8 at
  // O = 1. Refused unless a stamp names one.
  EXPECT_EQ(resolved(1, 98, 98, 4), "refused container.e8_collision");
  EXPECT_EQ(resolved(1, 98, 98, 4, "fp8-e4m3-b128"), "fp8-e4m3-b128");
  EXPECT_EQ(resolved(1, 98, 98, 4, "int8-row"), "int8-row");
  EXPECT_EQ(resolved(1, 98, 98, 4, "e8-iq3-lattice"), "e8-iq3");
  EXPECT_EQ(resolved(3, 98, 3 * 98, 4), "refused container.e8_collision");
  EXPECT_EQ(resolved(3, 98, 3 * 98, 4, "fp8-e4m3-b128"), "fp8-e4m3-b128");
}

TEST(ContainerFormat, RefusalsNameTheirRule) {
  EXPECT_EQ(resolved(4, 10, 7, 16), "refused container.no_layout");
  EXPECT_EQ(resolved(4, 10, 40, 20), "refused container.scale_count");
  EXPECT_EQ(resolved(4, 10, 20, 4 * 4 * 3), "refused container.scale_count");  // no g fits
  EXPECT_EQ(resolved(4, 10, 40, 16, "int4-row"), "refused container.stamp_mismatch");
  EXPECT_EQ(resolved(4, 10, 40, 16, "int8"), "refused container.stamp_unknown");
  EXPECT_EQ(resolved(4, 256, 512, 32, "int4-grouped"), "int4-g128");  // the registry's name
}

TEST(ContainerFormat, RegistryNamesAndOrdinals) {
  EXPECT_EQ(registry_ordinal("fp8-e4m3-b128"), 8);
  EXPECT_EQ(registry_ordinal("int3-g64"), 5);
  EXPECT_FALSE(registry_ordinal("mxfp4").has_value());  // Vulkan-only, no CPU reader
  EXPECT_EQ((CF{CF::kInt4Group, 64}).registry_name(), "int4-grouped");
  EXPECT_EQ((CF{CF::kInt2Row}).ordinal(), 3);
  EXPECT_EQ((CF{CF::kInt3G64}).row_bytes(65), 48u);
  EXPECT_EQ((CF{CF::kFp8Block}).scale_count(129, 300), 2u * 3u);
}

}  // namespace
}  // namespace qrepack
