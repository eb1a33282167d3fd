// Writing .pt files that torch.load(path, weights_only=True) accepts in torch 1.13 and 2.x
// (reference/serialization.md B7): protocol-2 pickle of dicts, lists, strings, ints, bools,
// None and tensors (legacy typed storages, _rebuild_tensor_v2 with 6 arguments), in a zip of
// STORED records under "archive/", data 64-byte aligned, correct CRC32s, ZIP64 end records
// always. A float scalar (pt_float, BINFLOAT) loads with weights_only only on torch >= 2.0:
// torch 1.13's weights_only unpickler has no float opcode, so a file meant for it holds none.
// Written atomically through a sibling temp file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "qrepack/core/dtype.h"
#include "qrepack/core/error.h"

namespace qrepack {

struct PtOut;
using PtOutPtr = std::shared_ptr<const PtOut>;

class ByteSink;

/// Writes a tensor's bytes (exactly numel * element size) when the file reaches its storage,
/// so a file far larger than memory is produced one storage at a time.
using PtBytesWriter = std::function<Status(ByteSink&)>;

struct PtOutTensor {
  Dtype dtype;
  std::vector<std::uint64_t> shape;
  std::shared_ptr<const std::vector<std::uint8_t>> bytes;  ///< contiguous, little-endian
  PtBytesWriter write;  ///< used instead of `bytes` when they are null
};

struct PtOut {
  struct None {};
  using List = std::vector<PtOutPtr>;
  using Dict = std::vector<std::pair<std::string, PtOutPtr>>;  ///< string keys, in order
  std::variant<None, bool, std::int64_t, double, std::string, List, Dict, PtOutTensor> v;
};

PtOutPtr pt_none();
PtOutPtr pt_bool(bool b);
PtOutPtr pt_int(std::int64_t i);
/// A Python float (BINFLOAT: 8 bytes, big-endian IEEE double); torch 2.x only, see above.
PtOutPtr pt_float(double d);
PtOutPtr pt_str(std::string s);
PtOutPtr pt_list(PtOut::List items);
PtOutPtr pt_dict(PtOut::Dict items);
PtOutPtr pt_tensor(Dtype dtype, std::vector<std::uint64_t> shape, std::vector<std::uint8_t> bytes);
/// A tensor whose bytes `write` produces while the file is written (their CRC32 is computed
/// as they pass and patched into the record's local header).
PtOutPtr pt_tensor_deferred(Dtype dtype, std::vector<std::uint64_t> shape, PtBytesWriter write);

/// The zip of a torch.save file around an already-pickled "archive/data.pkl" and storage
/// records "archive/data/<i>" (the layout write_torch_file uses). For tests and fuzz targets
/// that craft pickles by hand; does not commit `sink`.
Status write_torch_zip(ByteSink& sink, std::span<const std::uint8_t> pickle,
                       std::span<const std::vector<std::uint8_t>> storages);

/// Writes `root` to `path` atomically. Errors: a dtype without a legacy torch storage class,
/// tensor bytes that do not match the shape (deferred: a writer writing another count), a
/// deferred writer's own error, duplicate dict keys.
Status write_torch_file(const std::string& path, const PtOutPtr& root);

}  // namespace qrepack
