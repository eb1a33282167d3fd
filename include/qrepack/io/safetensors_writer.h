// safetensors: writing. The plan (names, dtypes, shapes) is known first, so the header is
// computed up front and tensor data is streamed in plan order without holding the tensors in
// memory. Header JSON is compact with "__metadata__" first and fields in the order dtype, shape,
// data_offsets (as the reference crate writes it), padded with spaces to a multiple of 8.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qrepack/core/dtype.h"
#include "qrepack/core/error.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/safetensors.h"

namespace qrepack {

/// A tensor the writer will emit, by view: its name and shape live elsewhere (a checkpoint's
/// header, a plan's arena, the TensorSpecs a layout or shard plan owns). No heap of its own, so
/// a plan of 100k outputs holds 40 bytes per output plus what its arena holds.
struct TensorView {
  std::string_view name;
  Dtype dtype;
  std::span<const std::uint64_t> shape;
};

/// A tensor the writer will emit, owning its name and shape (small lists: fixtures, tests,
/// artifacts of a few hundred tensors).
struct TensorSpec {
  std::string name;
  Dtype dtype;
  std::vector<std::uint64_t> shape;
  TensorView view() const { return {name, dtype, shape}; }
};

/// Views of `specs`, in order (valid while `specs` is neither resized nor destroyed).
std::vector<TensorView> views_of(std::span<const TensorSpec> specs);

/// The spec of a tensor read from a file (its name, dtype and shape copied).
inline TensorSpec spec_of(const TensorEntry& e) {
  return {std::string(e.name), e.dtype, {e.shape.begin(), e.shape.end()}};
}

/// Header bytes and the data offsets of every tensor, in the given order. Move-only:
/// `tensors` views `owned_views` (which view `owned`), or the caller's views (those of the
/// ShardPlan holding the layout).
struct SafetensorsLayout {
  SafetensorsLayout() = default;
  SafetensorsLayout(SafetensorsLayout&&) = default;
  SafetensorsLayout& operator=(SafetensorsLayout&&) = default;
  SafetensorsLayout(const SafetensorsLayout&) = delete;
  SafetensorsLayout& operator=(const SafetensorsLayout&) = delete;

  std::span<const TensorView> tensors;
  std::vector<TensorSpec> owned;  ///< what plan_safetensors was given (empty for a view)
  std::vector<TensorView> owned_views;
  // Each tensor's data offsets follow from the sizes before it: derived in order as the
  // header is written, not held (16 bytes per tensor).
  std::map<std::string, std::string> metadata;
  /// A __metadata__ written after the tensors instead, keys in this order (then `metadata`
  /// is empty).
  std::vector<std::pair<std::string, std::string>> metadata_last;
  /// Bytes of the 8-byte length and the padded JSON (which is formatted again as it is
  /// written, never held: a shard of 100k tensors has a header of megabytes).
  std::uint64_t header_size = 0;
  std::uint64_t data_size = 0;
  std::uint64_t file_size() const { return header_size + data_size; }
};

/// Computes the layout. Errors: duplicate names, the reserved name "__metadata__", sizes that
/// overflow or are not whole bytes, a header over kMaxSafetensorsHeader.
Result<SafetensorsLayout> plan_safetensors(std::vector<TensorSpec> tensors,
                                           const std::map<std::string, std::string>& metadata);
/// The same for tensors the caller keeps alive (and unmoved) as long as the layout, with what
/// they view: the layout views them instead of holding a copy.
Result<SafetensorsLayout> plan_safetensors_view(std::span<const TensorView> tensors,
                                                const std::map<std::string, std::string>& metadata);

/// The same with "__metadata__" after the tensors and its keys in the order given (the
/// hand-written header of upstream's Inkling dense overlay); nothing else changes. With
/// `data_align` (a power of two, at least 8) the header is space-padded until the data starts
/// at a multiple of it (Qwen3.8's sidecar: 4096).
Result<SafetensorsLayout> plan_safetensors_metadata_last(
    std::vector<TensorSpec> tensors, std::vector<std::pair<std::string, std::string>> metadata,
    std::uint64_t data_align = 8);

/// Bytes of `t`'s data (its shape's elements at its dtype's width; 0 when they overflow or are
/// not whole bytes, which planning a layout refuses).
std::uint64_t data_bytes(const TensorView& t);

/// Reorders specs so each tensor starts at a multiple of its element size when laid out back
/// to back (wider elements first, stable otherwise), as the reference writer does.
void sort_for_alignment(std::vector<TensorSpec>& tensors);

/// The header bytes of `layout` (the 8-byte length and the padded JSON), as they are written.
std::vector<std::uint8_t> safetensors_header_bytes(const SafetensorsLayout& layout);

/// Streams one file: header at construction time, then each tensor's bytes in layout order.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const SafetensorsLayout& layout, ByteSink& sink)
      : layout_(layout), sink_(sink) {}

  /// Starts tensor `name`, which must be the next tensor in layout order; the previous tensor
  /// must be complete.
  Status begin_tensor(std::string_view name);
  /// Appends bytes to the current tensor; more than its size is an error.
  Status append(std::span<const std::uint8_t> bytes);
  /// Convenience: begin_tensor + append of the whole tensor.
  Status write_tensor(std::string_view name, std::span<const std::uint8_t> bytes);
  /// Checks every tensor was written in full (writing the header of an empty file), without
  /// committing the sink.
  Status finish_data();
  /// finish_data(), then commits the sink.
  Status finish();

 private:
  Status write_header_once();
  const SafetensorsLayout& layout_;
  ByteSink& sink_;
  bool header_written_ = false;
  std::size_t next_ = 0;         ///< index of the next tensor to begin
  std::uint64_t remaining_ = 0;  ///< bytes still owed by the current tensor
};

}  // namespace qrepack
