// colibri-llama: llama.c reads BF16 / F16 / F32 as stored, so the container is the source's
// shards staged unchanged (hard link, else copy) after every tensor was checked against what
// llama.c reads for the config, plus llama_meta.json with each shard's SHA-256 (upstream
// convert_llama.py; reference/colibri-engines.md §1.6, §8).
#include <fmt/format.h>

#include <filesystem>

#include "remote/paths.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRule = "llama.config";

Error config_error(const std::string& dir, std::string message) {
  return config_key_error(dir, std::move(message), kRule);
}

Result<std::uint64_t> dim(const nlohmann::ordered_json& c, const char* key,
                          const std::string& dir) {
  return config_dim(c, key, dir, kRule);
}

bool truthy(const nlohmann::ordered_json& c, const char* key) {
  if (!c.contains(key)) return false;
  const auto& v = c[key];
  return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
           (v.is_number() && v.get<double>() == 0) ||
           (v.is_string() && v.get_ref<const std::string&>().empty()));
}

// Every tensor llama.c reads for the config, with its shape (its load_t and convert_llama.py's
// expected set).
Result<TensorContract> expected(const nlohmann::ordered_json& c, const std::string& dir) {
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (truthy(c, key))
      return config_error(dir, fmt::format("{}=true is not supported by llama.c", key));
  }
  QR_ASSIGN_OR_RETURN(d, dim(c, "hidden_size", dir));
  QR_ASSIGN_OR_RETURN(h, dim(c, "num_attention_heads", dir));
  std::uint64_t kv = h, hd = d / h;
  if (c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()) {
    QR_ASSIGN_OR_RETURN(v, dim(c, "num_key_value_heads", dir));
    kv = v;
  }
  if (c.contains("head_dim") && !c["head_dim"].is_null() &&
      !(c["head_dim"].is_number() && c["head_dim"].get<double>() == 0)) {
    QR_ASSIGN_OR_RETURN(v, dim(c, "head_dim", dir));
    hd = v;
  }
  QR_ASSIGN_OR_RETURN(f, dim(c, "intermediate_size", dir));
  QR_ASSIGN_OR_RETURN(vocab, dim(c, "vocab_size", dir));
  QR_ASSIGN_OR_RETURN(layers, dim(c, "num_hidden_layers", dir));
  if (layers > 4096) {  // llama.c's own range; the expected list grows with it
    return config_error(dir, fmt::format("num_hidden_layers {} is over llama.c's 4096", layers));
  }
  if (h % kv != 0) {
    return config_error(dir, "num_attention_heads is not a multiple of num_key_value_heads");
  }
  if (hd == 0) return config_error(dir, "hidden_size / num_attention_heads is 0 and no head_dim");
  const bool tied = c.contains("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean() &&
                    c["tie_word_embeddings"].get<bool>();
  TensorContract want;
  want.add("model.embed_tokens.weight", {vocab, d});
  want.add("model.norm.weight", {d});
  if (!tied) want.add("lm_head.weight", {vocab, d});
  want.per_layer(layers, "model.layers.{}.",
                 {{"input_layernorm.weight", {d}},
                  {"post_attention_layernorm.weight", {d}},
                  {"self_attn.q_proj.weight", {h * hd, d}},
                  {"self_attn.k_proj.weight", {kv * hd, d}},
                  {"self_attn.v_proj.weight", {kv * hd, d}},
                  {"self_attn.o_proj.weight", {d, h * hd}},
                  {"mlp.gate_proj.weight", {f, d}},
                  {"mlp.up_proj.weight", {f, d}},
                  {"mlp.down_proj.weight", {d, f}}});
  return want;
}

// model.layers.N.self_attn.rotary_emb.inv_freq: a buffer some exports carry; llama.c ignores it.
bool inert(std::string_view name) {
  return match_indices("model.layers.{}.self_attn.rotary_emb.inv_freq", name).has_value();
}

}  // namespace

Result<ContainerPlan> plan_llama(const Checkpoint& ck, const ContainerOptions& o) {
  const std::string& dir = ck.directory();
  if (!o.scheme.empty() && o.scheme != "as-stored") {
    return Error(ErrorKind::kUsage,
                 fmt::format("--target colibri-llama stages the BF16/F16/F32 shards as stored "
                             "(llama.c quantizes nothing it loads); --to {} has no reader",
                             o.scheme))
        .with_rule("target.scheme");
  }
  if (o.expert_bits || o.down_bits) {
    return Error(ErrorKind::kUsage, "--target colibri-llama takes no --bits")
        .with_rule("target.scheme");
  }
  QR_ASSIGN_OR_RETURN(config, read_config(dir, "colibri-llama"));
  QR_ASSIGN_OR_RETURN(want, expected(config, dir));
  const bool tied = !want.contains("lm_head.weight");
  ContainerPlan plan;
  plan.family = "llama";
  plan.model_type = "llama";
  plan.recognized = std::make_shared<Recognized>();
  ContainerBuilder b(plan);
  std::vector<std::string> problems, strays;  // strays (names llama.c never reads) listed last
  for (const std::uint32_t i : ck.by_name()) {
    const TensorRef t = ck.tensors()[i];
    const std::string name(t.entry->name);
    if (!want.contains(name)) {
      if (inert(name) || (tied && name == "lm_head.weight")) {
        b.source(name, "stage", inert(name) ? "llama.inert_rotary_buffer" : "llama.tied_lm_head");
        continue;
      }
      strays.push_back(fmt::format("{}: not a tensor llama.c reads", name));
      continue;
    }
    if (t.entry->dtype != Dtype::kBF16 && t.entry->dtype != Dtype::kF16 &&
        t.entry->dtype != Dtype::kF32) {
      want.mark_present(name);
      problems.push_back(
          fmt::format("{}: dtype {} is not BF16/F16/F32", name, dtype_info(t.entry->dtype).name));
      continue;
    }
    if (want.check(name, t.entry->shape, problems)) b.source(name, "stage", "llama.reads");
  }
  const std::vector<std::string> missing = want.missing();
  if (!missing.empty()) {
    problems.push_back(fmt::format("missing {} tensor(s) llama.c reads, first: {}", missing.size(),
                                   missing.front()));
  }
  problems.insert(problems.end(), strays.begin(), strays.end());
  if (!problems.empty()) {
    const std::size_t shown = std::min<std::size_t>(problems.size(), 12);
    return Error(ErrorKind::kUnclaimedTensor,
                 fmt::format("{} problem(s) against what llama.c reads: {}{}", problems.size(),
                             fmt::join(problems.begin(),
                                       problems.begin() + static_cast<std::ptrdiff_t>(shown), "; "),
                             problems.size() > shown ? "; ..." : ""))
        .in_file(dir)
        .with_rule("llama.tensors");
  }
  for (const SafetensorsFile& s : ck.shards()) plan.staged_shards.push_back(s.path());
  std::sort(plan.staged_shards.begin(), plan.staged_shards.end(),
            [](const std::string& x, const std::string& y) {
              return fs::path(x).filename() < fs::path(y).filename();
            });
  // The upstream tool records the absolute source directory; a remote source, its URL with the
  // resolved commit.
  std::error_code ec;
  const std::string source = remote::is_remote_path(dir) ? dir : fs::canonical(dir, ec).string();
  const std::size_t count = want.tensors().size();
  plan.staged_meta_name = "llama_meta.json";
  plan.staged_meta = [source, count](const std::vector<std::pair<std::string, std::string>>& d) {
    nlohmann::ordered_json m;
    m["source"] = source;
    m["tensors"] = count;
    m["shards"] = nlohmann::ordered_json::object();
    for (const auto& [name, sha] : d) m["shards"][name] = sha;
    return python_json(m, 1) + "\n";
  };
  copy_side_files(
      plan, dir,
      {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"});
  add_generation_config(plan, dir, config);
  plan.counts["tensors staged as stored"] = ck.tensors().size();
  plan.counts["shards staged"] = plan.staged_shards.size();
  return plan;
}

}  // namespace qrepack
