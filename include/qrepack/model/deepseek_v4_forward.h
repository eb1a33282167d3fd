// The reference forward pass of DeepSeek V4.1 Flash (model_type deepseek_v41 /
// deepseek_v41_text), as its runtime c/deepseek_v41.c and upstream's torch reference
// c/tools/dsv41_ref.py compute it for a prompt (docs/model.md "DeepSeek V4 / V4.1";
// reference/colibri-engines.md §1.15), on the release as downloaded:
//   HC       hc_mult copies of the residual stream; each sublayer's mixes (Sinkhorn over
//            hc_{attn,ffn}_{fn,base,scale}) expand its output back into the copies, and its
//            `pre` collapses them for the next sublayer
//   engram   on engram_layer_ids, n-gram hash rows (dsv41_engram.json) gated into each copy
//   attn     MQA with a sink: sliding window, plus on compressing layers the pooled KV of the
//            nearest kv source read where the (two-level) DSA indexer points; o_groups / o_lora
//   MoE      sqrtsoftplus router with the bias for the choice only, FP4 experts (e2m1 +
//            UE8M0 per 32, decoded exactly) and one FP8 shared expert
// Dense projections FP8 e4m3 with UE8M0 per 32x32 tile; everything else BF16 / F32. In f32
// with a fixed evaluation order (bit-identical for any thread count), weights read one matrix
// (one expert, one engram row) at a time. The DSpark draft head (mtp.*) and the vision tower
// are not run.
// DeepSeek V4 Flash (deepseek_v4) runs through the same class as c/deepseek_v4.c computes it
// (model/deepseek_v4_runtime.h): token by token, with its e4m3 activation quantization and
// bf16 rounding, 128x128 FP8 tiles, ape and overlapping 1:4 compressor windows, the indexer's
// FP4 compressor, tid2eid hash routing and the hc_head close; its MTP layer is not run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"

namespace qrepack {

/// Whether `model_type` (config.json's top level) is DeepSeek V4's or V4.1's.
bool is_deepseek_v4_forward_type(const std::string& model_type);

class DeepseekV4Forward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s when it has
  /// none. Variants the pass does not implement are refused by name (rule forward.support)
  /// before any weight is read.
  static Result<DeepseekV4Forward> open(const std::string& path,
                                        const std::string& fallback_config_dir = "");
  DeepseekV4Forward(DeepseekV4Forward&&) noexcept;
  DeepseekV4Forward& operator=(DeepseekV4Forward&&) noexcept;
  ~DeepseekV4Forward() override;

  const std::string& model_type() const override;
  std::uint64_t vocab_size() const override;
  std::uint64_t hidden_size() const override;
  std::uint64_t layer_count() const override;
  const std::string& directory() const override;
  std::vector<std::string> input_files() const override;
  void set_cache_budget(std::uint64_t bytes) override;
  void set_progress(std::function<void(std::string_view)> progress) override;
  /// Every row of a sequence as one prefill chunk (the prompt as the runtime reads it).
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) override;
  /// As the runtime generates: the prompt one prefill chunk, every later token a decode step
  /// (which may read index keys another layer published: docs/model.md).
  Result<TokenIds> generate(const TokenIds& prompt, std::uint64_t n) override;

 private:
  struct State;
  explicit DeepseekV4Forward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
