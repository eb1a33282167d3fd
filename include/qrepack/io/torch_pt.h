// Reading torch.save files (zip + pickle protocol 2) without executing anything: a restricted
// unpickler implementing only the opcodes and globals torch.load(weights_only=True) allows
// (reference/serialization.md B4-B6), producing a value tree whose tensors are references into
// the file. It checks what torch does not: storage record lengths, offsets and strides in
// bounds, one dtype per storage key.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "qrepack/core/dtype.h"
#include "qrepack/core/error.h"
#include "qrepack/io/zip_reader.h"

namespace qrepack {

/// A tensor stored in a .pt: where its storage is and how the view walks it (in elements).
struct PtTensor {
  Dtype dtype;
  std::string storage_key;
  std::uint64_t storage_offset = 0;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint64_t> stride;
  std::uint64_t storage_data_offset = 0;  ///< absolute file offset of the storage record
  bool contiguous() const;
  std::uint64_t numel() const;
};

struct PtValue;
using PtList = std::vector<std::shared_ptr<PtValue>>;
/// Dict keys are strings or ints in pickled files torch accepts; kept in insertion order.
using PtDict = std::vector<std::pair<std::shared_ptr<PtValue>, std::shared_ptr<PtValue>>>;

struct PtValue {
  struct None {};
  struct Tuple {
    PtList items;
  };
  /// Only while unpickling (a GLOBAL or a storage persistent id); never in a loaded tree.
  struct Global {
    std::string module, name;
  };
  struct Storage {
    Dtype dtype;
    std::string key;
    std::uint64_t numel;
  };
  std::variant<None, bool, std::int64_t, double, std::string, PtList, Tuple, PtDict, PtTensor,
               Global, Storage>
      v;

  bool is_dict() const { return std::holds_alternative<PtDict>(v); }
  bool is_tensor() const { return std::holds_alternative<PtTensor>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v); }
  /// The value of string key `key` in a dict, or null.
  const PtValue* get(const std::string& key) const;
};

class TorchFile {
 public:
  static Result<TorchFile> open(const std::string& path);
  static Result<TorchFile> from_source(std::shared_ptr<const ByteSource> source);
  const PtValue& root() const { return *root_; }
  const std::string& path() const { return zip_.source().name(); }
  /// Reads a tensor's elements into `out` (numel * itemsize bytes), made contiguous.
  Status read(const PtTensor& t, std::span<std::uint8_t> out) const;
  /// Reads elements [first, first + count) of a contiguous tensor (row-major order).
  Status read_elements(const PtTensor& t, std::uint64_t first, std::uint64_t count,
                       std::span<std::uint8_t> out) const;

 private:
  TorchFile(ZipReader zip, std::shared_ptr<PtValue> root)
      : zip_(std::move(zip)), root_(std::move(root)) {}
  ZipReader zip_;
  std::shared_ptr<PtValue> root_;
};

/// Caps on what a pickle may make us allocate.
inline constexpr std::uint64_t kMaxPickleBytes = 256ull << 20;
inline constexpr std::size_t kMaxPickleStack = 1'000'000;

}  // namespace qrepack
