// GGUF: parsing the header, key/value store and tensor infos (include/qrepack/io/gguf.h).
// A cursor reads the source through a small buffer; every length and count is compared with
// the bytes left in the file before anything is reserved, and nested arrays are walked with an
// explicit stack bounded by kMaxGgufArrayDepth. Tensor infos are checked afterwards, in one
// place (gguf_validate.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "io/gguf_internal.h"

namespace qrepack {
namespace gguf_detail {

Cursor::Cursor(const ByteSource& s) : source_(s), size_(s.size()) {}

Status Cursor::fill(std::uint64_t need, std::string_view what) {
  if (need > size_ - pos_) {
    return Error(ErrorKind::kTruncatedData,
                 fmt::format("file ends at byte {} inside {} ({} bytes needed at byte {})", size_,
                             what, need, pos_))
        .at_offset(pos_)
        .with_rule("gguf.truncated");
  }
  if (pos_ >= buf_at_ && pos_ + need <= buf_at_ + buf_.size()) return ok_status();
  const std::uint64_t n = std::min<std::uint64_t>(size_ - pos_, std::max(need, kChunk));
  buf_.resize(n);
  buf_at_ = pos_;
  return source_.read_at(pos_, buf_);
}

Status Cursor::bytes(void* out, std::uint64_t n, std::string_view what) {
  QR_TRY(fill(n, what));
  std::memcpy(out, buf_.data() + (pos_ - buf_at_), n);
  pos_ += n;
  return ok_status();
}

Result<std::uint64_t> Cursor::u64(std::string_view what) {
  std::uint8_t b[8];
  QR_TRY(bytes(b, 8, what));
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | b[i];
  return v;
}

Result<std::uint32_t> Cursor::u32(std::string_view what) {
  std::uint8_t b[4];
  QR_TRY(bytes(b, 4, what));
  return static_cast<std::uint32_t>(b[0] | b[1] << 8 | b[2] << 16 |
                                    static_cast<std::uint32_t>(b[3]) << 24);
}

Result<std::string> Cursor::string(std::uint64_t cap, std::string_view what) {
  QR_ASSIGN_OR_RETURN(len, u64(what));
  if (len > cap) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("{} of {} bytes, over the cap of {}", what, len, cap))
        .at_offset(pos_ - 8)
        .with_rule("gguf.string_length");
  }
  std::string s;
  QR_TRY(fill(len, what));  // checked against the file before the allocation
  s.resize(len);
  QR_TRY(bytes(s.data(), len, what));
  if (!valid_utf8(s)) {
    return Error(ErrorKind::kHeaderNotUtf8, fmt::format("{} is not valid UTF-8", what))
        .at_offset(pos_ - len)
        .with_rule("gguf.utf8");
  }
  return s;
}

// Strict UTF-8 as Python's decoder reads it: no overlongs, surrogates or code points past
// U+10FFFF.
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0, lo = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F, lo = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F, lo = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07, lo = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3F);
    }
    if (cp < lo || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::uint64_t scalar_width(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kString:  // its length
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kArray:  // element type and count
      return 12;
  }
  return 1;
}

}  // namespace gguf_detail

namespace {

using gguf_detail::Cursor;
using gguf_detail::scalar_width;

bool known_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::kF64); }

Error metadata_error(ErrorKind k, std::string msg, std::string_view rule, std::uint64_t at) {
  Error e(k, std::move(msg));
  e.at_offset(at).with_rule(rule);
  return e;
}

// A scalar or string value of type `t` (not an array).
Status read_leaf(Cursor& c, GgufType t, GgufValue& v) {
  v.type = t;
  if (t == GgufType::kString) {
    QR_ASSIGN_OR_RETURN(s, c.string(kMaxGgufStringBytes, "metadata string"));
    v.s = std::move(s);
    return ok_status();
  }
  const std::uint64_t w = scalar_width(t);
  std::uint8_t b[8] = {};
  const std::uint64_t at = c.pos();
  QR_TRY(c.bytes(b, w, "metadata value"));
  std::uint64_t bits = 0;
  for (std::uint64_t i = w; i-- > 0;) bits = bits << 8 | b[i];
  if (t == GgufType::kBool && bits > 1) {
    return metadata_error(ErrorKind::kInvalidMetadata,
                          fmt::format("bool value {} is neither 0 nor 1", bits), "gguf.bool", at);
  }
  if (t == GgufType::kF32) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.f = f;
  } else if (t == GgufType::kF64) {
    std::memcpy(&v.f, &bits, 8);
  } else if (v.is_signed() && w < 8 && (bits >> (8 * w - 1)) & 1) {
    bits |= ~std::uint64_t{0} << (8 * w);  // sign-extend
  }
  v.u = bits;
  return ok_status();
}

struct Frame {
  GgufArray* array;
  std::uint64_t left;
};

// An array header (element type, count) at the cursor, checked and reserved.
Result<std::shared_ptr<GgufArray>> array_header(Cursor& c, std::uint64_t& values,
                                                std::uint64_t& count_out) {
  const std::uint64_t at = c.pos();
  QR_ASSIGN_OR_RETURN(et, c.u32("array element type"));
  QR_ASSIGN_OR_RETURN(count, c.u64("array length"));
  if (!known_type(et)) {
    return metadata_error(ErrorKind::kInvalidMetadata,
                          fmt::format("array element type {} is not a GGUF value type", et),
                          "gguf.value_type", at);
  }
  const auto t = static_cast<GgufType>(et);
  values += std::min(count, kMaxGgufValues + 1);
  if (values > kMaxGgufValues) {
    return metadata_error(ErrorKind::kLimitExceeded,
                          fmt::format("metadata holds over {} values", kMaxGgufValues),
                          "gguf.max_values", at);
  }
  if (count > c.left() / scalar_width(t)) {
    return metadata_error(ErrorKind::kTruncatedData,
                          fmt::format("array of {} {} cannot fit in the {} bytes left", count,
                                      gguf_type_name(t), c.left()),
                          "gguf.truncated", at);
  }
  auto a = std::make_shared<GgufArray>();
  a->element = t;
  a->items.reserve(count);
  count_out = count;
  return a;
}

// The value of type `t` at the cursor: arrays of arrays walked with a stack, not recursion.
Status read_value(Cursor& c, GgufType t, GgufValue& out, std::uint64_t& values) {
  if (t != GgufType::kArray) return read_leaf(c, t, out);
  out.type = t;
  std::uint64_t count = 0;
  QR_ASSIGN_OR_RETURN(top, array_header(c, values, count));
  out.array = top;
  std::vector<Frame> stack{{top.get(), count}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.left == 0) {
      stack.pop_back();
      continue;
    }
    --f.left;
    GgufArray* a = f.array;
    a->items.emplace_back();
    GgufValue& v = a->items.back();
    if (a->element != GgufType::kArray) {
      QR_TRY(read_leaf(c, a->element, v));
      continue;
    }
    if (stack.size() >= kMaxGgufArrayDepth) {
      return metadata_error(ErrorKind::kLimitExceeded,
                            fmt::format("arrays nested over {} deep", kMaxGgufArrayDepth),
                            "gguf.array_depth", c.pos());
    }
    v.type = GgufType::kArray;
    QR_ASSIGN_OR_RETURN(inner, array_header(c, values, count));
    v.array = inner;
    stack.push_back({inner.get(), count});
  }
  return ok_status();
}

Status read_kvs(Cursor& c, std::uint64_t n, GgufHeader& h) {
  std::uint64_t values = n;
  h.metadata.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    GgufKv kv;
    QR_ASSIGN_OR_RETURN(key, c.string(kMaxGgufNameBytes, "metadata key"));
    kv.key = std::move(key);
    const std::uint64_t at = c.pos();
    QR_ASSIGN_OR_RETURN(type, c.u32("metadata value type"));
    if (!known_type(type)) {
      return metadata_error(
          ErrorKind::kInvalidMetadata,
          fmt::format("key \"{}\": value type {} is not a GGUF value type", kv.key, type),
          "gguf.value_type", at);
    }
    QR_TRY(read_value(c, static_cast<GgufType>(type), kv.value, values));
    h.metadata.push_back(std::move(kv));
  }
  return ok_status();
}

Status read_tensor_infos(Cursor& c, std::uint64_t n, GgufHeader& h) {
  h.tensors.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    GgufTensor t;
    QR_ASSIGN_OR_RETURN(name, c.string(kMaxGgufNameBytes, "tensor name"));
    t.name = std::move(name);
    const std::uint64_t at = c.pos();
    QR_ASSIGN_OR_RETURN(n_dims, c.u32("tensor dimension count"));
    if (n_dims == 0 || n_dims > kMaxGgufDims) {
      return Error(ErrorKind::kInvalidShape,
                   fmt::format("{} dimensions (GGUF tensors have 1 to {})", n_dims, kMaxGgufDims))
          .in_tensor(t.name)
          .at_offset(at)
          .with_rule("gguf.n_dims");
    }
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      QR_ASSIGN_OR_RETURN(dim, c.u64("tensor dimension"));
      t.dims.push_back(dim);
    }
    QR_ASSIGN_OR_RETURN(type, c.u32("tensor type"));
    QR_ASSIGN_OR_RETURN(offset, c.u64("tensor offset"));
    t.ggml_type = type;
    t.offset = offset;
    h.tensors.push_back(std::move(t));
  }
  return ok_status();
}

Status read_counts(Cursor& c, GgufHeader& h, std::uint64_t& tensors, std::uint64_t& kvs) {
  char magic[4];
  QR_TRY(c.bytes(magic, 4, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return metadata_error(ErrorKind::kInvalidMetadata,
                          "not a GGUF file (the first 4 bytes are not \"GGUF\")", "gguf.magic", 0);
  }
  QR_ASSIGN_OR_RETURN(version, c.u32("version"));
  if (version != 2 && version != 3) {
    return metadata_error(ErrorKind::kInvalidMetadata,
                          fmt::format("GGUF version {} (qrepack reads 2 and 3)", version),
                          "gguf.version", 4);
  }
  h.version = version;
  QR_ASSIGN_OR_RETURN(nt, c.u64("tensor count"));
  QR_ASSIGN_OR_RETURN(nk, c.u64("metadata count"));
  // Each tensor info takes at least 28 bytes and each key/value 13: counts past what the file
  // can hold are refused before anything is reserved for them.
  if (nt > kMaxGgufTensors || nt > c.left() / 28) {
    return metadata_error(
        ErrorKind::kLimitExceeded,
        fmt::format("tensor count {} (cap {}, {} bytes left)", nt, kMaxGgufTensors, c.left()),
        "gguf.tensor_count", 8);
  }
  if (nk > kMaxGgufKeys || nk > c.left() / 13) {
    return metadata_error(
        ErrorKind::kLimitExceeded,
        fmt::format("metadata count {} (cap {}, {} bytes left)", nk, kMaxGgufKeys, c.left()),
        "gguf.kv_count", 16);
  }
  tensors = nt;
  kvs = nk;
  return ok_status();
}

}  // namespace

Result<GgufHeader> parse_gguf(const ByteSource& source) {
  Cursor c(source);
  GgufHeader h;
  h.file_size = source.size();
  std::uint64_t nt = 0, nk = 0;
  Status s = read_counts(c, h, nt, nk);
  if (s.ok()) s = read_kvs(c, nk, h);
  if (s.ok()) s = read_tensor_infos(c, nt, h);
  if (s.ok()) s = gguf_detail::validate(h, c.pos());
  if (!s.ok()) return std::move(s.error().in_file(source.name()));
  return h;
}

}  // namespace qrepack
