#include "qrepack/io/torch_pt_writer.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <set>

#include "qrepack/core/checked.h"
#include "qrepack/io/byte_sink.h"

namespace qrepack {
namespace {

void put(std::vector<std::uint8_t>& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

class Pickler {
 public:
  std::vector<std::uint8_t> out;
  std::vector<const PtOutTensor*> storages;  ///< key i = storages[i]

  Status dump(const PtOut& root) {
    out = {0x80, 2};
    QR_TRY(value(root));
    out.push_back('.');
    return ok_status();
  }

 private:
  void global(const char* module, const char* name) {
    out.push_back('c');
    for (const char* p = module; *p; ++p) out.push_back(static_cast<std::uint8_t>(*p));
    out.push_back('\n');
    for (const char* p = name; *p; ++p) out.push_back(static_cast<std::uint8_t>(*p));
    out.push_back('\n');
  }
  void str(const std::string& s) {
    out.push_back('X');
    put(out, s.size(), 4);
    out.insert(out.end(), s.begin(), s.end());
  }
  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out.push_back('K');
      put(out, static_cast<std::uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out.push_back('M');
      put(out, static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out.push_back('J');
      put(out, static_cast<std::uint64_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(v))),
          4);
    } else {
      out.push_back(0x8a);
      out.push_back(8);
      put(out, static_cast<std::uint64_t>(v), 8);
    }
  }
  void int_tuple(const std::vector<std::uint64_t>& xs) {
    if (xs.empty()) {
      out.push_back(')');
      return;
    }
    out.push_back('(');
    for (auto x : xs) integer(static_cast<std::int64_t>(x));
    out.push_back('t');
  }
  Status value(const PtOut& v) {
    if (std::holds_alternative<PtOut::None>(v.v)) {
      out.push_back('N');
    } else if (const auto* b = std::get_if<bool>(&v.v)) {
      out.push_back(*b ? 0x88 : 0x89);
    } else if (const auto* i = std::get_if<std::int64_t>(&v.v)) {
      integer(*i);
    } else if (const auto* f = std::get_if<double>(&v.v)) {
      out.push_back('G');  // BINFLOAT: the double's bits, most significant byte first
      const auto bits = std::bit_cast<std::uint64_t>(*f);
      for (int k = 7; k >= 0; --k) out.push_back(static_cast<std::uint8_t>(bits >> (8 * k)));
    } else if (const auto* s = std::get_if<std::string>(&v.v)) {
      str(*s);
    } else if (const auto* l = std::get_if<PtOut::List>(&v.v)) {
      out.push_back(']');
      if (!l->empty()) {
        out.push_back('(');
        for (const auto& x : *l) QR_TRY(value(*x));
        out.push_back('e');
      }
    } else if (const auto* d = std::get_if<PtOut::Dict>(&v.v)) {
      out.push_back('}');
      std::set<std::string> keys;
      if (!d->empty()) {
        out.push_back('(');
        for (const auto& [k, x] : *d) {
          if (!keys.insert(k).second) {
            return Error(ErrorKind::kDuplicateKey, fmt::format("dict key \"{}\" appears twice", k));
          }
          str(k);
          QR_TRY(value(*x));
        }
        out.push_back('u');
      }
    } else {
      const auto& t = std::get<PtOutTensor>(v.v);
      const auto& info = dtype_info(t.dtype);
      if (info.torch_storage.empty()) {
        return Error(ErrorKind::kInvalidArgument,
                     fmt::format("{} has no legacy torch storage class; torch 1.13 cannot load it",
                                 info.name));
      }
      const auto numel = checked_numel(t.shape);
      const bool sized = numel && (!t.bytes || *numel * (info.bits / 8) == t.bytes->size());
      if (!sized || (!t.bytes && !t.write)) {
        return Error(ErrorKind::kInvalidArgument, "tensor bytes do not match its shape");
      }
      const std::string key = std::to_string(storages.size());
      storages.push_back(&t);
      global("torch._utils", "_rebuild_tensor_v2");
      out.push_back('(');
      out.push_back('(');  // persistent id ('storage', <class>, key, 'cpu', numel)
      str("storage");
      global("torch", std::string(info.torch_storage).c_str());
      str(key);
      str("cpu");
      integer(static_cast<std::int64_t>(*numel));
      out.push_back('t');
      out.push_back('Q');
      integer(0);
      int_tuple(t.shape);
      std::vector<std::uint64_t> stride(t.shape.size());
      std::uint64_t step = 1;
      for (std::size_t k = t.shape.size(); k-- > 0;) {
        stride[k] = step;
        step *= t.shape[k];
      }
      int_tuple(stride);
      out.push_back(0x89);  // requires_grad False
      global("collections", "OrderedDict");
      out.push_back(')');
      out.push_back('R');
      out.push_back('t');
      out.push_back('R');
    }
    return ok_status();
  }
};

struct CentralEntry {
  std::string name;
  std::uint32_t crc;
  std::uint64_t size, offset;
};

// zlib's crc32 takes a uInt length: large spans go in pieces.
std::uint32_t crc32_update(std::uint32_t c, std::span<const std::uint8_t> data) {
  for (std::size_t done = 0; done < data.size();) {
    const std::size_t n = std::min<std::size_t>(data.size() - done, 1u << 30);
    c = static_cast<std::uint32_t>(::crc32(c, data.data() + done, static_cast<uInt>(n)));
    done += n;
  }
  return c;
}

// Passes bytes on to a sink, counting them and updating their CRC32.
class CrcSink final : public ByteSink {
 public:
  explicit CrcSink(ByteSink& inner) : inner_(inner) {}
  const std::string& name() const override { return inner_.name(); }
  Status write(std::span<const std::uint8_t> bytes) override {
    crc_ = crc32_update(crc_, bytes);
    written_ += bytes.size();
    return inner_.write(bytes);
  }
  Status commit() override {
    return Error(ErrorKind::kIoWrite, "a storage writer cannot commit the file").in_file(name());
  }
  std::uint64_t position() const override { return written_; }
  std::uint32_t crc() const { return crc_; }

 private:
  ByteSink& inner_;
  std::uint32_t crc_ = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
  std::uint64_t written_ = 0;
};

// The local header of a STORED record at `offset`, its data 64-byte aligned ("FB" padding, as
// torch writes it).
std::vector<std::uint8_t> local_header(const std::string& name, std::uint32_t crc,
                                       std::uint64_t size, std::uint64_t offset) {
  const bool z64 = size >= 0xFFFFFFFFull || offset >= 0xFFFFFFFFull;
  std::vector<std::uint8_t> h;
  put(h, 0x04034b50, 4);
  put(h, z64 ? 45 : 20, 2);
  put(h, 0x0800, 2);  // UTF-8 names
  put(h, 0, 2);       // stored
  put(h, 0, 4);       // time, date
  put(h, crc, 4);     // at offset 14
  put(h, z64 ? 0xFFFFFFFFu : size, 4);
  put(h, z64 ? 0xFFFFFFFFu : size, 4);
  put(h, name.size(), 2);
  const std::size_t z64_len = z64 ? 20 : 0;
  const std::uint64_t before_pad = offset + 30 + name.size() + z64_len + 4;
  const std::size_t pad = static_cast<std::size_t>((64 - before_pad % 64) % 64);
  put(h, z64_len + 4 + pad, 2);
  h.insert(h.end(), name.begin(), name.end());
  if (z64) {
    put(h, 1, 2);
    put(h, 16, 2);
    put(h, size, 8);
    put(h, size, 8);
  }
  put(h, 0x4246, 2);
  put(h, pad, 2);
  h.insert(h.end(), pad, 'Z');
  return h;
}

class ZipWriter {
 public:
  explicit ZipWriter(ByteSink& sink) : sink_(sink) {}
  Status add(const std::string& name, std::span<const std::uint8_t> data) {
    const std::uint64_t offset = sink_.position();
    const std::uint32_t c = crc32_update(static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0)), data);
    QR_TRY(sink_.write(local_header(name, c, data.size(), offset)));
    QR_TRY(sink_.write(data));
    entries_.push_back({name, c, data.size(), offset});
    return ok_status();
  }
  /// A record of `size` bytes that `write` produces; its CRC32 is patched in afterwards.
  Status add_streamed(const std::string& name, std::uint64_t size, const PtBytesWriter& write) {
    const std::uint64_t offset = sink_.position();
    QR_TRY(sink_.write(local_header(name, 0, size, offset)));
    CrcSink crc(sink_);
    QR_TRY(write(crc));
    if (crc.position() != size) {
      return Error(ErrorKind::kIoWrite, fmt::format("{}: {} bytes produced for a {}-byte storage",
                                                    name, crc.position(), size));
    }
    std::vector<std::uint8_t> c;
    put(c, crc.crc(), 4);
    QR_TRY(sink_.patch(offset + 14, c));
    entries_.push_back({name, crc.crc(), size, offset});
    return ok_status();
  }
  Status finish() {
    const std::uint64_t cd_offset = sink_.position();
    std::vector<std::uint8_t> cd;
    for (const auto& e : entries_) {
      const bool z64 = e.size >= 0xFFFFFFFFull || e.offset >= 0xFFFFFFFFull;
      put(cd, 0x02014b50, 4);
      put(cd, 0x031E, 2);  // made by: unix, 3.0
      put(cd, z64 ? 45 : 20, 2);
      put(cd, 0x0800, 2);
      put(cd, 0, 2);
      put(cd, 0, 4);
      put(cd, e.crc, 4);
      put(cd, z64 ? 0xFFFFFFFFu : e.size, 4);
      put(cd, z64 ? 0xFFFFFFFFu : e.size, 4);
      put(cd, e.name.size(), 2);
      put(cd, z64 ? 28 : 0, 2);
      put(cd, 0, 2);  // comment
      put(cd, 0, 2);  // disk
      put(cd, 0, 2);  // internal attributes
      put(cd, 0, 4);  // external attributes
      put(cd, z64 ? 0xFFFFFFFFu : e.offset, 4);
      cd.insert(cd.end(), e.name.begin(), e.name.end());
      if (z64) {
        put(cd, 1, 2);
        put(cd, 24, 2);
        put(cd, e.size, 8);
        put(cd, e.size, 8);
        put(cd, e.offset, 8);
      }
    }
    QR_TRY(sink_.write(cd));
    const std::uint64_t z64_eocd = sink_.position();
    std::vector<std::uint8_t> t;
    put(t, 0x06064b50, 4);
    put(t, 44, 8);
    put(t, 0x031E, 2);
    put(t, 45, 2);
    put(t, 0, 4);
    put(t, 0, 4);
    put(t, entries_.size(), 8);
    put(t, entries_.size(), 8);
    put(t, cd.size(), 8);
    put(t, cd_offset, 8);
    put(t, 0x07064b50, 4);  // locator
    put(t, 0, 4);
    put(t, z64_eocd, 8);
    put(t, 1, 4);
    put(t, 0x06054b50, 4);  // classic end record
    put(t, 0, 2);
    put(t, 0, 2);
    const std::uint64_t n = entries_.size() >= 0xFFFF ? 0xFFFF : entries_.size();
    put(t, n, 2);
    put(t, n, 2);
    put(t, cd.size() >= 0xFFFFFFFFull ? 0xFFFFFFFFu : cd.size(), 4);
    put(t, cd_offset >= 0xFFFFFFFFull ? 0xFFFFFFFFu : cd_offset, 4);
    put(t, 0, 2);
    return sink_.write(t);
  }

 private:
  ByteSink& sink_;
  std::vector<CentralEntry> entries_;
};

Status finish_torch_zip(ZipWriter& zip) {
  const std::uint8_t version[] = {'3', '\n'};
  QR_TRY(zip.add("archive/version", version));
  return zip.finish();
}

}  // namespace

PtOutPtr pt_none() { return std::make_shared<PtOut>(PtOut{PtOut::None{}}); }
PtOutPtr pt_bool(bool b) { return std::make_shared<PtOut>(PtOut{b}); }
PtOutPtr pt_int(std::int64_t i) { return std::make_shared<PtOut>(PtOut{i}); }
PtOutPtr pt_float(double d) { return std::make_shared<PtOut>(PtOut{d}); }
PtOutPtr pt_str(std::string s) { return std::make_shared<PtOut>(PtOut{std::move(s)}); }
PtOutPtr pt_list(PtOut::List items) { return std::make_shared<PtOut>(PtOut{std::move(items)}); }
PtOutPtr pt_dict(PtOut::Dict items) { return std::make_shared<PtOut>(PtOut{std::move(items)}); }
PtOutPtr pt_tensor(Dtype dtype, std::vector<std::uint64_t> shape, std::vector<std::uint8_t> bytes) {
  return std::make_shared<PtOut>(
      PtOut{PtOutTensor{dtype,
                        std::move(shape),
                        std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes)),
                        {}}});
}
PtOutPtr pt_tensor_deferred(Dtype dtype, std::vector<std::uint64_t> shape, PtBytesWriter write) {
  return std::make_shared<PtOut>(
      PtOut{PtOutTensor{dtype, std::move(shape), nullptr, std::move(write)}});
}

Status write_torch_file(const std::string& path, const PtOutPtr& root) {
  Pickler p;
  auto st = p.dump(*root);
  if (!st.ok()) return std::move(st.error().in_file(path));
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  ZipWriter zip(*sink);
  QR_TRY(zip.add("archive/data.pkl", p.out));
  p.out = {};
  for (std::size_t i = 0; i < p.storages.size(); ++i) {
    const PtOutTensor& t = *p.storages[i];
    const std::string name = "archive/data/" + std::to_string(i);
    if (t.bytes) {
      QR_TRY(zip.add(name, *t.bytes));
    } else {
      const std::uint64_t size = *checked_numel(t.shape) * (dtype_info(t.dtype).bits / 8);
      auto added = zip.add_streamed(name, size, t.write);
      if (!added.ok()) return std::move(added.error().in_file(path));
    }
  }
  QR_TRY(finish_torch_zip(zip));
  return sink->commit();
}

Status write_torch_zip(ByteSink& sink, std::span<const std::uint8_t> pickle,
                       std::span<const std::vector<std::uint8_t>> storages) {
  ZipWriter zip(sink);
  QR_TRY(zip.add("archive/data.pkl", pickle));
  for (std::size_t i = 0; i < storages.size(); ++i) {
    QR_TRY(zip.add("archive/data/" + std::to_string(i), storages[i]));
  }
  return finish_torch_zip(zip);
}

}  // namespace qrepack
