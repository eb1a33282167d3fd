#include "qrepack/io/zip_reader.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "qrepack/core/checked.h"

namespace qrepack {
namespace {

std::uint64_t le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Error zip_error(const std::string& what) {
  return Error(ErrorKind::kZipInvalid, what).with_rule("zip.structure");
}

}  // namespace

const ZipEntry* ZipReader::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Result<ZipReader> ZipReader::open(std::shared_ptr<const ByteSource> src) {
  const std::uint64_t size = src->size();
  std::uint8_t magic[4] = {};
  if (size >= 4) QR_TRY(src->read_at(0, magic));
  if (size < 22 || std::memcmp(magic, "PK\x03\x04", 4) != 0) {
    return Error(ErrorKind::kNotTorchZip,
                 "not a zip archive (torch.save files start with PK\\x03\\x04; legacy "
                 "pre-1.6 pickles are not supported)")
        .in_file(src->name())
        .with_rule("pt.zip_magic");
  }
  // End of central directory: the last 22..65557 bytes.
  const std::uint64_t tail = std::min<std::uint64_t>(size, 22 + 65535);
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(tail));
  QR_TRY(src->read_at(size - tail, buf));
  std::int64_t eocd = -1;
  for (std::int64_t i = static_cast<std::int64_t>(tail) - 22; i >= 0; --i) {
    if (std::memcmp(buf.data() + i, "PK\x05\x06", 4) == 0) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0)
    return std::move(zip_error("no end-of-central-directory record").in_file(src->name()));
  const std::uint8_t* e = buf.data() + eocd;
  std::uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
  const std::uint64_t eocd_abs = size - tail + static_cast<std::uint64_t>(eocd);
  if (eocd_abs >= 20) {  // ZIP64 locator just before the classic record
    std::uint8_t loc[20];
    QR_TRY(src->read_at(eocd_abs - 20, loc));
    if (std::memcmp(loc, "PK\x06\x07", 4) == 0) {
      const std::uint64_t z64 = le(loc + 8, 8);
      std::uint8_t rec[56];
      if (z64 > size || size - z64 < 56)
        return std::move(zip_error("ZIP64 record beyond the file").in_file(src->name()));
      QR_TRY(src->read_at(z64, rec));
      if (std::memcmp(rec, "PK\x06\x06", 4) != 0) {
        return std::move(zip_error("bad ZIP64 end record signature").in_file(src->name()));
      }
      count = le(rec + 32, 8);
      cd_size = le(rec + 40, 8);
      cd_offset = le(rec + 48, 8);
    }
  }
  if (count > kMaxZipEntries) {
    return std::move(
        zip_error(fmt::format("{} entries exceed the cap of {}", count, kMaxZipEntries))
            .in_file(src->name()));
  }
  const auto cd_end = checked_add(cd_offset, cd_size);
  if (!cd_end || *cd_end > size || cd_size > (std::uint64_t{1} << 30)) {
    return std::move(zip_error("central directory beyond the file").in_file(src->name()));
  }
  std::vector<std::uint8_t> cd(static_cast<std::size_t>(cd_size));
  QR_TRY(src->read_at(cd_offset, cd));
  ZipReader z;
  z.source_ = src;
  std::size_t pos = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (pos + 46 > cd.size() || std::memcmp(cd.data() + pos, "PK\x01\x02", 4) != 0) {
      return std::move(zip_error(fmt::format("central directory entry {} is malformed", i))
                           .in_file(src->name()));
    }
    const std::uint8_t* c = cd.data() + pos;
    const std::uint64_t method = le(c + 10, 2), name_len = le(c + 28, 2), extra_len = le(c + 30, 2),
                        comment_len = le(c + 32, 2);
    ZipEntry entry;
    entry.crc32 = static_cast<std::uint32_t>(le(c + 16, 4));
    std::uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), local = le(c + 42, 4);
    if (pos + 46 + name_len + extra_len + comment_len > cd.size()) {
      return std::move(zip_error("central directory entry overruns").in_file(src->name()));
    }
    entry.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
    // ZIP64 extra: the fields that are 0xFFFFFFFF, in order usize, csize, offset.
    const std::uint8_t* x = c + 46 + name_len;
    for (std::uint64_t off = 0; off + 4 <= extra_len;) {
      const std::uint64_t id = le(x + off, 2), len = le(x + off + 2, 2);
      if (off + 4 + len > extra_len) break;
      if (id == 1) {
        std::uint64_t p = off + 4;
        auto take = [&](std::uint64_t& field) {
          if (field == 0xFFFFFFFFu && p + 8 <= off + 4 + len) {
            field = le(x + p, 8);
            p += 8;
          }
        };
        take(usize);
        take(csize);
        take(local);
      }
      off += 4 + len;
    }
    if (method != 0) {
      return Error(ErrorKind::kZipUnsupported,
                   fmt::format("entry '{}' is compressed (method {}); torch writes stored "
                               "entries only",
                               entry.name, method))
          .in_file(src->name())
          .with_rule("zip.stored_only");
    }
    if (csize != usize)
      return std::move(
          zip_error(fmt::format("entry '{}': sizes differ", entry.name)).in_file(src->name()));
    std::uint8_t lh[30];
    if (local > size || size - local < 30)
      return std::move(
          zip_error(fmt::format("entry '{}': local header beyond the file", entry.name))
              .in_file(src->name()));
    QR_TRY(src->read_at(local, lh));
    if (std::memcmp(lh, "PK\x03\x04", 4) != 0) {
      return std::move(
          zip_error(fmt::format("entry '{}': bad local header", entry.name)).in_file(src->name()));
    }
    entry.data_offset = local + 30 + le(lh + 26, 2) + le(lh + 28, 2);  // local < size: no wrap
    entry.size = usize;
    const auto end = checked_add(entry.data_offset, entry.size);
    if (!end || *end > size) {
      return std::move(
          zip_error(fmt::format("entry '{}': data runs past the end of the file", entry.name))
              .in_file(src->name()));
    }
    if (!z.by_name_.emplace(entry.name, z.entries_.size()).second) {
      return std::move(
          zip_error(fmt::format("entry '{}' appears twice", entry.name)).in_file(src->name()));
    }
    z.entries_.push_back(std::move(entry));
    pos += 46 + name_len + extra_len + comment_len;
  }
  return z;
}

Result<std::vector<std::uint8_t>> ZipReader::read_checked(const ZipEntry& e,
                                                          std::uint64_t cap) const {
  if (e.size > cap) {
    return Error(ErrorKind::kZipInvalid,
                 fmt::format("entry '{}' is {} bytes, over the {} cap", e.name, e.size, cap))
        .in_file(source_->name());
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(e.size));
  QR_TRY(source_->read_at(e.data_offset, bytes));
  const auto crc =
      static_cast<std::uint32_t>(::crc32(0L, bytes.data(), static_cast<uInt>(bytes.size())));
  if (crc != e.crc32) {
    return Error(
               ErrorKind::kZipInvalid,
               fmt::format("entry '{}': CRC32 {:08x}, directory says {:08x}", e.name, crc, e.crc32))
        .in_file(source_->name())
        .with_rule("zip.crc32");
  }
  return bytes;
}

}  // namespace qrepack
