// docs/security.md lists every cap with its value; this keeps the table and the code in step.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/name_pattern.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/gguf.h"
#include "qrepack/io/safetensors.h"
#include "qrepack/io/torch_pt.h"
#include "qrepack/io/zip_reader.h"
#include "qrepack/model/glm_forward.h"
#include "qrepack/omega/qat_convert.h"
#include "qrepack/schemes/scheme.h"
#include "targets/gemma4/gemma4_pack.h"
#include "test_util.h"

namespace qrepack {
namespace {

TEST(SecurityDoc, CapsMatchTheCode) {
  const std::vector<std::pair<std::string, std::uint64_t>> caps = {
      {"kMaxSafetensorsHeader", kMaxSafetensorsHeader},
      {"kMaxSafetensorsTensors", kMaxSafetensorsTensors},
      {"kMaxTensorNameBytes", kMaxTensorNameBytes},
      {"kMaxSafetensorsMetadataBytes", kMaxSafetensorsMetadataBytes},
      {"kMaxJsonDepth", kMaxJsonDepth},
      {"kMaxIndexBytes", kMaxIndexBytes},
      {"kMaxDirectoryEntries", kMaxDirectoryEntries},
      {"kMaxConfigBytes", kMaxConfigBytes},
      {"kMaxDim", kMaxDim},
      {"kMaxModelWeights", kMaxModelWeights},
      {"kMaxZipEntries", kMaxZipEntries},
      {"kMaxPickleBytes", kMaxPickleBytes},
      {"kMaxPickleStack", kMaxPickleStack},
      {"kMaxPickleDepth", static_cast<std::uint64_t>(kMaxPickleDepth)},
      {"kMaxPickleTreeNodes", kMaxPickleTreeNodes},
      {"kPickleTreeNodesPerByte", kPickleTreeNodesPerByte},
      {"kMaxPtDims", kMaxPtDims},
      {"kMaxPtViewBytesPerFileByte", kMaxPtViewBytesPerFileByte},
      {"kMaxRunStateBytes", kMaxRunStateBytes},
      {"kMaxManifestBytes", kMaxManifestBytes},
      {"kMaxPatternBytes", kMaxPatternBytes},
      {"kMaxQatWeightElements", kMaxQatWeightElements},
      {"kMaxNextnLayers", kMaxNextnLayers},
      {"kMaxRopeDim", kMaxRopeDim},
      {"kMaxGgufTensors", kMaxGgufTensors},
      {"kMaxGgufKeys", kMaxGgufKeys},
      {"kMaxGgufValues", kMaxGgufValues},
      {"kMaxGgufStringBytes", kMaxGgufStringBytes},
      {"kMaxGgufNameBytes", kMaxGgufNameBytes},
      {"kMaxGgufArrayDepth", static_cast<std::uint64_t>(kMaxGgufArrayDepth)},
      {"kMaxGgufDims", kMaxGgufDims},
      {"kMaxGgufAlignment", kMaxGgufAlignment},
      {"kGemma4MaxLayers", kGemma4MaxLayers},
      {"kGemma4MaxExperts", kGemma4MaxExperts},
      {"kGemma4MaxManifestBytes", kGemma4MaxManifestBytes},
      {"kGemma4MaxManifestLayers", kGemma4MaxManifestLayers},
  };
  const auto bytes = testing::read_bytes(std::string(QREPACK_SOURCE_DIR) + "/docs/security.md");
  const std::string doc(bytes.begin(), bytes.end());
  for (const auto& [name, value] : caps) {
    const auto row = doc.find("| `" + name + "` | ");
    ASSERT_NE(row, std::string::npos) << name << " has no row in docs/security.md";
    const auto start = row + name.size() + 7;  // past "| `", the name and "` | "
    EXPECT_EQ(doc.substr(start, doc.find(' ', start) - start), std::to_string(value)) << name;
  }
}

TEST(ReadmeDoc, SchemeTableRowsComeFromTheSchemeTable) {
  const auto bytes = testing::read_bytes(std::string(QREPACK_SOURCE_DIR) + "/README.md");
  const std::string readme(bytes.begin(), bytes.end());
  for (const SchemeInfo& s : scheme_table()) {
    const std::string row = "| `" + std::string(s.name) + "` | " + std::string(s.output) + " |";
    EXPECT_NE(readme.find(row), std::string::npos) << "README lacks the row: " << row;
    EXPECT_NE(scheme_help().find(std::string(s.name)), std::string::npos);
  }
  // The group sizes are written once (engine_group_sizes); help and README name each.
  const auto& g = scheme_table()[1];
  ASSERT_EQ(g.kind, SchemeKind::kInt4Group);
  for (std::uint64_t n : engine_group_sizes()) {
    EXPECT_NE(std::string(g.output).find(std::to_string(n)), std::string::npos) << n;
    EXPECT_NE(scheme_help().find(std::to_string(n)), std::string::npos) << n;
  }
}

}  // namespace
}  // namespace qrepack
