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
#include <string_view>
#include <unordered_map>
#include <unordered_set>
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

/// A pickled dict: string or int keys (what torch.save writes), kept in insertion order. A key
/// may appear once (a Python dict cannot hold it twice; a pickle that sets it again is refused
/// rather than read with other semantics). Lookup by string key is a hash lookup, so walking a
/// pack of N records costs O(N), not O(N^2).
class PtDict {
 public:
  using Item = std::pair<std::shared_ptr<PtValue>, std::shared_ptr<PtValue>>;
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  /// Appends; false (and nothing added) when a string or int key is already present.
  bool add(std::shared_ptr<PtValue> key, std::shared_ptr<PtValue> value);
  /// The value of string key `key`, or null.
  const PtValue* find(std::string_view key) const;
  /// Moves every key and value out (iterative destruction of deep trees).
  void take_all(std::vector<std::shared_ptr<PtValue>>& out);

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, std::size_t> by_string_;
  std::unordered_set<std::int64_t> int_keys_;
};

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

  PtValue() = default;
  PtValue(const PtValue&) = default;
  PtValue& operator=(const PtValue&) = default;
  PtValue(PtValue&&) = default;
  PtValue& operator=(PtValue&&) = default;
  /// Frees the subtree this node alone owns with a work list, never by recursion, so a chain
  /// of nested containers as deep as the pickle allows cannot overflow the stack.
  ~PtValue();

  bool is_dict() const { return std::holds_alternative<PtDict>(v); }
  bool is_tensor() const { return std::holds_alternative<PtTensor>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v); }
  /// The value of string key `key` in a dict, or null.
  const PtValue* get(std::string_view key) const;
  /// Moves this node's children (list/tuple items, dict keys and values) into `out`.
  void take_children(std::vector<std::shared_ptr<PtValue>>& out);
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

/// Caps on what a pickle may make us allocate or walk (docs/security.md).
inline constexpr std::uint64_t kMaxPickleBytes = 256ull << 20;
inline constexpr std::size_t kMaxPickleStack = 1'000'000;
/// Nesting depth of the loaded tree (torch.save of a state dict or an Omega pack is 3-4 deep).
inline constexpr int kMaxPickleDepth = 64;
/// Nodes of the loaded tree counted once per path from the root: memo references (BINGET) can
/// share one subtree many times, and every consumer's walk costs this much.
inline constexpr std::uint64_t kMaxPickleTreeNodes = 16'000'000;
/// ... and at most this many per byte of data.pkl (plus kPickleTreeNodesFloor), so the walk of
/// a small file stays small: a real tree has about one node per byte or fewer.
inline constexpr std::uint64_t kPickleTreeNodesPerByte = 64;
inline constexpr std::uint64_t kPickleTreeNodesFloor = 65'536;
/// Tensor dimensions (torch's own limit is 64; real checkpoints use at most 5).
inline constexpr std::size_t kMaxPtDims = 32;
/// Bytes of tensor views reachable from the root, counted once per path, over the file size:
/// a tensor shared by a few keys (tied weights) is fine, one referenced a million times is not.
inline constexpr std::uint64_t kMaxPtViewBytesPerFileByte = 4;

}  // namespace qrepack
