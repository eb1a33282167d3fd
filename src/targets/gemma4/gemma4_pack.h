// colibri-gemma4: the PACKED_DIR colibri's Gemma 4 runtime (c/gemma4.c, c/gemma4_backend.c)
// maps beside the GGUF it runs (docs/targets.md "colibri-gemma4"; reference/colibri-engines.md
// §9.3). No upstream tool packs a real GGUF (g4lab is not published); the layout is the
// loader's reading:
//   manifest.json  format "g4lab-expert-manifest-v2", architecture "gemma4", source (the GGUF's
//                  absolute path), expert_count E, expert_used_count k, one layer object per
//                  block: W, F, "fused_gate_up", packed_file, payload_bytes, record_stride,
//                  expert_scale {F32 at blk.N.ffn_down_exps.scale} (never null: null drops the
//                  scale), components gate | up | down {Q4_0, slice_bytes, absolute source
//                  offset, expert stride, offset within the expert}. Python's json.dumps
//                  (indent=2, ASCII) in make_gemma4_tiny.py's key order.
//   layer-NN.g4ex  a 4096-byte little-endian header ("G4EXPK01", u32 1, layer, E, 2, 4096;
//                  u64 4096, payload, stride, gate, up, down at 32..72; the rest zero), then
//                  expert e at 4096 + e * stride: gate (rows 0..F-1 of the expert's slice of
//                  blk.N.ffn_gate_up_exps), up (rows F..2F-1), down (its slice of
//                  blk.N.ffn_down_exps), Q4_0 bytes as stored, zero padding to the stride
//                  (payload rounded up to 4096). NN has two digits, three from layer 100.
// Refused before any output: another architecture, a missing metadata key, a missing or
// misshapen expert tensor, an expert type other than Q4_0 (the loader's only one), W or F not
// a multiple of 32, a split GGUF (the manifest's one source path cannot name several files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/io/gguf.h"
#include "qrepack/targets/check_load.h"
#include "targets/container/byte_layout.h"

namespace qrepack {

/// The loader's constants (gemma4_backend.c).
inline constexpr std::uint64_t kGemma4HeaderBytes = 4096;    ///< header, and the record alignment
inline constexpr std::uint64_t kGemma4Q4_0BlockBytes = 18;   ///< fp16 scale + 16 nibble bytes
inline constexpr std::uint64_t kGemma4MaxLayers = 256;       ///< block_count it accepts
inline constexpr std::uint64_t kGemma4MaxSourcePath = 2047;  ///< source bytes (char[2048])
inline constexpr std::uint64_t kGemma4MaxManifestBytes = std::uint64_t{64} << 20;
inline constexpr std::uint64_t kGemma4MaxManifestLayers = 4096;
inline constexpr std::uint64_t kGemma4MaxPackedName = 127;  ///< packed_file (char[128])
/// Experts per layer qrepack packs (the loader's limit is u32; Gemma 4 has 128): the plan holds
/// three pieces per expert, so layers x experts stays bounded.
inline constexpr std::uint64_t kGemma4MaxExperts = 4096;

/// What the GGUF says, checked: block count, W (embedding_length), F
/// (expert_feed_forward_length), E, k.
struct Gemma4Dims {
  std::uint64_t layers = 0, width = 0, expert_width = 0, experts = 0, used = 0;
};

/// One layer's sizes and where its tensors lie in the GGUF (absolute offsets).
struct Gemma4Layer {
  std::uint64_t experts = 0;
  std::uint64_t gate_bytes = 0, down_bytes = 0;  ///< slice bytes (up = gate)
  std::uint64_t payload = 0, stride = 0;         ///< record payload and its 4096-aligned stride
  std::uint64_t file_size = 0;                   ///< 4096 + E * stride
  std::uint64_t gate_up_at = 0, gate_up_stride = 0;
  std::uint64_t down_at = 0, down_stride = 0;
  std::uint64_t scale_at = 0;
};

struct Gemma4Pack {
  Gemma4Dims dims;
  std::vector<Gemma4Layer> layers;
  std::string source;  ///< the GGUF's absolute path (manifest.json's source)
  ByteRunPlan run;     ///< the files, manifest.json and qrepack.json's head
};

/// Reads the GGUF's metadata and tensor table (no tensor data) and plans every byte of the
/// packed directory, or refuses with one error naming the file, the tensor and the rule.
Result<Gemma4Pack> plan_gemma4_pack(const GgufFile& f);

/// Sizes and absolute offsets of layer `n` from the GGUF's tensor table (the planner's and
/// check-load's one derivation); an error names the tensor and the rule.
Result<Gemma4Layer> gemma4_layer(const GgufHeader& h, const Gemma4Dims& d, std::uint64_t n);
/// The metadata's dimensions, checked (rules gemma4.architecture, gemma4.metadata).
Result<Gemma4Dims> gemma4_dims(const GgufHeader& h);
/// The 4096 header bytes of a layer file.
std::vector<std::uint8_t> gemma4_header(std::uint64_t layer, const Gemma4Dims& d,
                                        const Gemma4Layer& l);
/// "layer-NN.g4ex".
std::string gemma4_file_name(std::uint64_t layer);

/// check-load of a packed directory: the loader's reading of manifest.json and of every
/// header (gemma4_backend.c), then what it never checks: the manifest against the GGUF's
/// metadata and tensor table, every record byte-equal to the GGUF's slices, zero padding and
/// exact file sizes.
Result<TargetLoadReport> check_load_gemma4(const std::string& dir);

}  // namespace qrepack
