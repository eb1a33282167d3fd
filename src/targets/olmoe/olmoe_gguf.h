// colibri-olmoe from a GGUF source (upstream convert_gguf_to_olmoe.py + gguf_olmoe_profile.py;
// reference/colibri-engines.md §1.8). Planned from the header alone, then written:
//   dense  llama.cpp names -> HF names; dequantized, stored F16 (1-D tensors F32); with
//          qk_permuted, attn_q / attn_k rows put back from llama.cpp's RoPE order
//   experts blk.L.ffn_{gate,up,down}_exps [cols, rows, E] sliced per expert, dequantized and
//          quantized int8 per row into model.layers.L.mlp.experts.E.merged_weight I8
//          [gate | up | down] + .qs F32 (scale = max(amax, 1e-12) / 127, x / scale rounded
//          half to even, clamped to [-128, 127])
//   files  model-NNNNN.safetensors: the dense tensors in GGUF order, then (weight, scales) per
//          expert in (layer, expert) order, a file closed once it holds 512 tensors or more;
//          within a file F32 first, then F16, then I8, each by name (the safetensors
//          package's order); config.json and tokenizer.json rebuilt from the metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/exec/container_exec.h"
#include "qrepack/io/gguf.h"
#include "qrepack/io/safetensors_writer.h"
#include "qrepack/targets/container.h"

namespace qrepack {

struct GgufOlmoeOptions {
  bool norm_topk_prob = false;  ///< config.json's norm_topk_prob (GGUF does not carry it)
  bool qk_permuted = false;     ///< undo llama.cpp's RoPE permutation of q and k
};

struct GgufOlmoeDims {
  std::uint64_t hidden, layers, heads, kv, experts, topk, inter, vocab;
};

/// One output tensor: a dense tensor (`dense`) or one expert's weight or scales.
struct GgufOlmoeOutput {
  TensorSpec spec;
  const GgufTensor* dense = nullptr;
  std::uint64_t permute_heads = 0;  ///< rows regrouped from RoPE order over this many heads
  std::uint64_t layer = 0, expert = 0;
  bool scales = false;  ///< the expert's .qs (else its merged_weight)
};

struct GgufOlmoeFile {
  std::string name;
  std::vector<GgufOlmoeOutput> tensors;  ///< in file order
};

struct GgufOlmoePlan {
  GgufOlmoeDims dims{};
  /// Per layer: the fused gate, up and down expert tensors.
  std::vector<std::array<const GgufTensor*, 3>> experts;
  std::vector<GgufOlmoeFile> files;
  std::string config_json;
  std::string tokenizer_json;
  std::vector<ContainerSource> sources;
  std::uint64_t out_tensors = 0;
};

/// Plans the conversion of `f`: architecture, names, shapes and types checked, every output
/// listed; reads no tensor data.
Result<GgufOlmoePlan> plan_olmoe_gguf(const GgufFile& f, const GgufOlmoeOptions& o);
/// config.json and tokenizer.json as the upstream converter writes them.
Result<std::string> olmoe_gguf_config(const GgufHeader& h, bool norm_topk_prob);
Result<std::string> olmoe_gguf_tokenizer(const GgufHeader& h);
/// Writes the planned files into `out_dir` (plain: the empty staged directory the caller
/// publishes; --resume or a --shard worker: OUT itself, as write_container does), then
/// config.json, tokenizer.json and qrepack.json (not a worker).
Result<ContainerReport> write_olmoe_gguf(const GgufFile& f, const GgufOlmoePlan& plan,
                                         const GgufOlmoeOptions& o, const std::string& out_dir,
                                         const ContainerRun& run = {});

}  // namespace qrepack
