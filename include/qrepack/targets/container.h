// The target side of a conversion into one engine runtime's own container (colibri-qwen36,
// colibri-qwen3, colibri-olmoe, colibri-llama): the output files, each a safetensors file
// whose tensors are listed before any data is read, the *units* of work that fill them (a
// tensor copied as stored, a float tensor cast, or one or more source matrices quantized into
// a data tensor and its scales), the side files, and what happened to every source tensor.
// A runtime's planner (targets/<runtime>/) builds it from names and config; the executor
// (qrepack/exec/container_exec.h) runs it: every byte lands at an offset known from the plan,
// so units run on any thread in any order and the output is identical for every thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/safetensors_writer.h"
#include "qrepack/targets/target.h"

namespace qrepack {

/// How signed integer codes sit in a nibble: q + 8 (the GLM runtime's fmt 2/4, dense Qwen3,
/// OLMoE has no nibbles) or q & 0xF (two's complement: the qwen36 runtime's merged_weight).
enum class Nibbles : std::uint8_t { kOffsetBinary, kTwosComplement };

/// One symmetric integer quantizer (reference/colibri-engines.md §1.4, §1.7, §1.9).
struct QuantRule {
  int bits = 4;             ///< 2..8: codes in [-(2^(bits-1)), 2^(bits-1) - 1]
  std::uint64_t group = 0;  ///< 0: one scale per row
  /// bits <= 4: two codes a byte (low nibble = even element); else one int8 a byte.
  bool packed() const { return bits <= 4; }
  Nibbles nibbles = Nibbles::kOffsetBinary;
  /// Each row padded to a whole byte (2-D [O, ceil(I/2)] layouts; the pad nibble is code 0);
  /// false: the pieces' elements are packed as one flat run.
  bool byte_rows = false;
  /// With byte_rows: each row's whole blocks of 64 as 32 bytes, byte k = element k (low
  /// nibble) | element k + 32 (high); the tail (cols mod 64) in pairs, low = even (Qwen3.8's
  /// "planar64-v8" sidecar codes).
  bool planar64 = false;
  /// A scale that comes out 0 (an all-zero group) is 1.0 (dense Qwen3) instead.
  bool zero_group_scale_one = false;
  /// amax is clamped to at least this before the division (torch clamp(min=1e-12)).
  float amax_floor = 1e-12f;
  /// The scale is raised to at least this after the division (numpy maximum(amax / 7, 1e-8),
  /// the GLM-style converters' floor); 0: none.
  float scale_floor = 0.0f;
  /// Codes clamped to [-qmax, qmax] (numpy clip(-127, 127)) instead of [-qmax - 1, qmax].
  bool symmetric = false;
  /// code = round-half-even(x * (1 / scale)) with 1 / scale one f32 division (k3_repack.py and
  /// kimi_k3.c's load-time quantizer) instead of x / scale.
  bool reciprocal = false;
  int qmax() const { return (1 << (bits - 1)) - 1; }
  bool operator==(const QuantRule&) const = default;
  /// The GLM-style converters' int4 (offset binary, scale max(amax / 7, 1e-8), no other
  /// floor): what kernels::int4_encode_row computes.
  bool engine_int4() const {
    return bits == 4 && nibbles == Nibbles::kOffsetBinary && amax_floor == 0.0f &&
           scale_floor == 1e-8f && !zero_group_scale_one;
  }
};

/// Codes of `n` rows of `cols` floats under `r`: one int8 per element and one scale per
/// group (row-major). Bit-exact with the upstream converters' torch / numpy math: amax in f32,
/// scale = max(max(amax, amax_floor) / qmax, scale_floor) (one f32 division), code =
/// round-half-even(x / scale) clamped.
void quantize_rows(const float* x, std::uint64_t n, std::uint64_t cols, const QuantRule& r,
                   std::int8_t* codes, float* scales);
/// The same, one scalar operation at a time: the reference the SIMD kernels (abs_max,
/// int_codes) are tested against.
void quantize_rows_reference(const float* x, std::uint64_t n, std::uint64_t cols,
                             const QuantRule& r, std::int8_t* codes, float* scales);
/// Packs `count` codes starting at flat element index `first` (even) into `out` under `r`.
void pack_codes(const std::int8_t* codes, std::uint64_t count, const QuantRule& r,
                std::uint8_t* out);
/// One row of `cols` codes in the planar64 layout (QuantRule::planar64) into (cols + 1) / 2
/// bytes.
void pack_codes_planar64(const std::int8_t* codes, std::uint64_t cols, const QuantRule& r,
                         std::uint8_t* out);
/// Bytes that `rows` x `cols` codes take under `r`.
std::uint64_t code_bytes(std::uint64_t rows, std::uint64_t cols, const QuantRule& r);

/// One source matrix feeding a quantized unit, with its quantizer.
struct UnitPiece {
  const LogicalWeight* weight = nullptr;
  QuantRule rule;
};

enum class UnitKind : std::uint8_t {
  kCopy,   ///< the raw tensor's bytes, unchanged
  kCast,   ///< a float weight (or a raw float tensor of any rank) stored as `dtype`
  kQuant,  ///< pieces quantized: codes into `data`, scales into `scales`, in piece order
};

struct ContainerUnit {
  UnitKind kind = UnitKind::kCopy;
  std::uint32_t file = 0;
  std::uint32_t data = 0;                 ///< tensor index within the file
  std::uint32_t scales = 0;               ///< kQuant: the scales tensor's index within the file
  TensorRef raw;                          ///< kCopy
  const LogicalWeight* weight = nullptr;  ///< kCast of a weight; null: kCast of `raw`
  Dtype dtype = Dtype::kF16;              ///< kCast: what it becomes
  std::vector<UnitPiece> pieces;          ///< kQuant
};

struct ContainerFile {
  std::string name;                 ///< relative to the output directory
  std::vector<TensorSpec> tensors;  ///< in file order
  std::map<std::string, std::string> metadata;
  /// A __metadata__ written after the tensors with its keys in this order (the hand-written
  /// header of convert_inkling_dense_int4.py); when set, `metadata` stays empty.
  std::vector<std::pair<std::string, std::string>> metadata_last;
  /// With metadata_last: the data starts at a multiple of this (8: no more than the format's).
  std::uint64_t data_align = 8;
};

/// A file the target writes besides the tensors: its bytes, a copy of a source file, or a
/// symbolic link to a file of another directory.
struct ContainerSideFile {
  std::string name;
  std::string bytes;      ///< when copy_from and link_to are empty
  std::string copy_from;  ///< a source path copied byte for byte
  std::string link_to;    ///< an absolute path the file links to (colibri-qwen36 --mtp-only)
};

/// What happened to one source tensor.
struct ContainerSource {
  std::string name;
  std::string disposition;  ///< convert, keep, merge, drop, stage
  std::string rule;
};

struct ContainerPlan {
  const Target* target = nullptr;
  std::string family;  ///< e.g. "qwen3_5_moe"
  std::string model_type;
  std::vector<ContainerFile> files;
  std::vector<ContainerUnit> units;
  std::vector<ContainerSideFile> side_files;
  std::vector<ContainerSource> sources;
  /// The source's shard files staged unchanged (colibri-llama) instead of tensor files, and
  /// the meta file written from their SHA-256s ((file name, hex digest) in staging order).
  std::vector<std::string> staged_shards;
  std::string staged_meta_name;
  std::function<std::string(const std::vector<std::pair<std::string, std::string>>&)> staged_meta;
  /// Lines for the PLAN summary: "experts int4 row (two's complement) 480", ...
  std::map<std::string, std::size_t> counts;
  /// After writing, every copied tensor's output bytes are read back and compared with the
  /// source's (colibri-kimi-k3: upstream's --verify-full over the MXFP4 experts).
  bool verify_copies = false;
  /// The recognized weights the units point into (the plan owns them).
  std::shared_ptr<Recognized> recognized;
};

/// Options a container target takes from the command line.
struct ContainerOptions {
  std::string scheme;            ///< --to, resolved to the target's default when empty
  int expert_bits = 0;           ///< --bits experts=N (0: the scheme's)
  int down_bits = 0;             ///< --bits down=N (qwen36 mixed slab; 0: as experts)
  std::uint64_t down_group = 0;  ///< --down-group (qwen36 mixed slab)
  int attn_bits = 0;             ///< --bits attn=4|8 (colibri-inkling-dense; 0: its default 8)
  int mla_bits = 0;              ///< --bits mla=4|8 (colibri-kimi-k3; 0: upstream's max(bits, 8))
  int head_bits = 0;             ///< --bits head=4|8 (colibri-kimi-k3; 0: upstream's max(bits, 8))
  std::uint64_t job_bytes = std::uint64_t{8} << 20;
  /// colibri-qwen36 --mtp-only --base-container B: only the MTP head, in B's scheme, beside
  /// links to B's files (empty: a whole conversion).
  std::string mtp_base;
};

/// Plans a conversion of `ck` into `t`'s container. Validates everything (names against the
/// family's contract, config keys, shapes) before returning; reads no tensor data.
Result<ContainerPlan> plan_container(const Checkpoint& ck, const Target& t,
                                     const ContainerOptions& o);

}  // namespace qrepack
