// colibri-olmoe from GGUF: config.json and tokenizer.json rebuilt from the metadata, byte for
// byte as upstream's gguf_olmoe_profile.py builds them and json.dumps(indent=2,
// ensure_ascii=False) writes them (keys in its insertion order, a newline at the end).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "targets/container/planners.h"
#include "targets/olmoe/olmoe_gguf.h"

namespace qrepack {
namespace {

using Json = nlohmann::ordered_json;

Error meta_error(std::string msg) {
  return Error(ErrorKind::kInvalidConfig, std::move(msg)).with_rule("olmoe_gguf.metadata");
}

// The config keys, in upstream's order (CONFIG_KEYS).
constexpr std::array<std::array<const char*, 2>, 9> kConfigKeys = {{
    {"olmoe.embedding_length", "hidden_size"},
    {"olmoe.block_count", "num_hidden_layers"},
    {"olmoe.attention.head_count", "num_attention_heads"},
    {"olmoe.attention.head_count_kv", "num_key_value_heads"},
    {"olmoe.expert_count", "num_experts"},
    {"olmoe.expert_used_count", "num_experts_per_tok"},
    {"olmoe.feed_forward_length", "intermediate_size"},
    {"olmoe.rope.freq_base", "rope_theta"},
    {"olmoe.attention.layer_norm_rms_epsilon", "rms_norm_eps"},
}};

Result<Json> number(const GgufHeader& h, const char* key) {
  const GgufValue* v = h.find(key);
  if (!v) return meta_error(fmt::format("metadata has no {}", key));
  if (v->is_float()) return Json(v->f);
  if (v->is_integer()) return v->is_signed() ? Json(v->as_i64()) : Json(v->u);
  return meta_error(fmt::format("{} is a {}, not a number", key, gguf_type_name(v->type)));
}

// A JSON string as json.dumps(ensure_ascii=False) writes it (the same escapes as nlohmann's).
std::string json_quoted(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::strict);
}

// Python's bool(value) of a metadata value (absent: False).
bool truthy(const GgufValue* v) {
  if (!v) return false;
  if (v->is_float()) return v->f != 0;
  if (v->type == GgufType::kString) return !v->s.empty();
  if (v->type == GgufType::kArray) return !v->array->items.empty();
  return v->u != 0;
}

// tokens[int(id)] as Python indexes (negative from the end); nullopt when id >= len.
Result<std::optional<std::string>> token_of(const GgufHeader& h, const char* key,
                                            const std::vector<GgufValue>& tokens) {
  const GgufValue* v = h.find(key);
  if (!v) return std::optional<std::string>();
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (!v->is_integer() && v->type != GgufType::kBool) {
    return meta_error(fmt::format("{} is a {}, not a token id", key, gguf_type_name(v->type)));
  }
  if (!v->is_signed() && v->u >= tokens.size()) return std::optional<std::string>();
  const std::int64_t id = v->as_i64();
  if (id >= n) return std::optional<std::string>();
  if (id < -n) return meta_error(fmt::format("{} {} is outside the vocabulary", key, id));
  return std::optional<std::string>(tokens[static_cast<std::size_t>(id < 0 ? n + id : id)].s);
}

Status check_strings(const GgufValue* v, const char* key) {
  if (!v) return ok_status();
  bool ok = v->type == GgufType::kArray && v->array->element == GgufType::kString;
  if (!ok) return meta_error(fmt::format("{} is not an array of strings", key));
  return ok_status();
}

// token_type 3 (control) and 4 (user-defined) become added tokens.
Result<std::vector<std::int64_t>> token_types(const GgufHeader& h, std::size_t n) {
  std::vector<std::int64_t> types(n, 1);
  const GgufValue* v = h.find("tokenizer.ggml.token_type");
  if (!v) return types;
  if (v->type != GgufType::kArray) return meta_error("tokenizer.ggml.token_type is not an array");
  const auto& items = v->array->items;
  for (std::size_t i = 0; i < n && i < items.size(); ++i) {
    if (!items[i].is_integer()) return meta_error("tokenizer.ggml.token_type holds non-integers");
    types[i] = items[i].as_i64();
  }
  return types;
}

void vocab_text(std::string& out, const std::vector<GgufValue>& tokens) {
  // A repeated token keeps its first position and takes its last id (a Python dict).
  std::unordered_map<std::string_view, std::size_t> at;
  std::vector<std::pair<std::string_view, std::size_t>> entries;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto [it, fresh] = at.emplace(tokens[i].s, entries.size());
    if (fresh) {
      entries.emplace_back(tokens[i].s, i);
    } else {
      entries[it->second].second = i;
    }
  }
  out += "    \"vocab\": {";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out += i ? ",\n      " : "\n      ";
    out += json_quoted(std::string(entries[i].first)) + ": " + std::to_string(entries[i].second);
  }
  out += entries.empty() ? "}" : "\n    }";
}

}  // namespace

Result<std::string> olmoe_gguf_config(const GgufHeader& h, bool norm_topk_prob) {
  Json c;
  for (const auto& [gguf, hf] : kConfigKeys) {
    QR_ASSIGN_OR_RETURN(v, number(h, gguf));
    c[hf] = std::move(v);
  }
  const GgufValue* tokens = h.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->array->items.empty()) {
    return meta_error("metadata has no tokenizer.ggml.tokens (it gives vocab_size)");
  }
  c["vocab_size"] = tokens->array->items.size();
  c["norm_topk_prob"] = norm_topk_prob;
  c["model_type"] = "olmoe";
  c["architectures"] = Json::array({"OlmoeForCausalLM"});
  return python_json(c, 2) + "\n";
}

Result<std::string> olmoe_gguf_tokenizer(const GgufHeader& h) {
  const GgufValue* tv = h.find("tokenizer.ggml.tokens");
  QR_TRY(check_strings(tv, "tokenizer.ggml.tokens"));
  const GgufValue* mv = h.find("tokenizer.ggml.merges");
  QR_TRY(check_strings(mv, "tokenizer.ggml.merges"));
  const std::vector<GgufValue>& tokens = tv->array->items;
  QR_ASSIGN_OR_RETURN(types, token_types(h, tokens.size()));
  std::string out = "{\n";
  out += fmt::format("  \"add_bos_token\": {},\n",
                     truthy(h.find("tokenizer.ggml.add_bos_token")) ? "true" : "false");
  out += fmt::format("  \"add_eos_token\": {},\n",
                     truthy(h.find("tokenizer.ggml.add_eos_token")) ? "true" : "false");
  out += "  \"model\": {\n    \"type\": \"BPE\",\n";
  vocab_text(out, tokens);
  if (mv && !mv->array->items.empty()) {
    out += ",\n    \"merges\": [";
    for (std::size_t i = 0; i < mv->array->items.size(); ++i) {
      out += (i ? ",\n      " : "\n      ") + json_quoted(mv->array->items[i].s);
    }
    out += "\n    ]";
  }
  out += "\n  },\n  \"pre_tokenizer\": {\n    \"type\": \"ByteLevel\",\n";
  out += "    \"add_prefix_space\": false\n  },\n  \"added_tokens\": [";
  bool any = false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != 3 && types[i] != 4) continue;
    out += any ? ",\n    {\n" : "\n    {\n";
    any = true;
    out += fmt::format("      \"id\": {},\n      \"content\": {},\n      \"special\": {}\n    }}",
                       i, json_quoted(tokens[i].s), types[i] == 3 ? "true" : "false");
  }
  out += any ? "\n  ]" : "]";
  for (const auto& [key, hf] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                std::pair{"tokenizer.ggml.eos_token_id", "eos_token"},
                                std::pair{"tokenizer.ggml.padding_token_id", "pad_token"}}) {
    QR_ASSIGN_OR_RETURN(tok, token_of(h, key, tokens));
    if (tok) out += fmt::format(",\n  \"{}\": {}", hf, json_quoted(*tok));
  }
  if (const GgufValue* t = h.find("tokenizer.chat_template")) {
    if (t->type != GgufType::kString) return meta_error("tokenizer.chat_template is not a string");
    out += ",\n  \"chat_template\": " + json_quoted(t->s);
  }
  return out + "\n}\n";
}

}  // namespace qrepack
