#include "qrepack/exec/reshard.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <filesystem>

#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/io/output_guard.h"
#include "qrepack/io/side_files.h"
#include "remote/paths.h"

namespace qrepack {
namespace {

// Streams a tensor through `buf`, feeding every chunk to `sink_chunk` and the hash.
template <typename Sink>
Result<std::uint64_t> stream_tensor(const Checkpoint& ck, const TensorRef& t,
                                    std::vector<std::uint8_t>& buf, Sink&& sink_chunk) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  const std::uint64_t size = t.entry->byte_size();
  for (std::uint64_t off = 0; off < size; off += buf.size()) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off));
    auto chunk = std::span(buf.data(), n);
    Status st = ck.read(t, off, chunk);
    if (st.ok()) st = sink_chunk(std::span<const std::uint8_t>(chunk));
    if (!st.ok()) {
      XXH64_freeState(state);
      return std::move(st).error();
    }
    XXH64_update(state, chunk.data(), chunk.size());
  }
  const std::uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

}  // namespace

Result<ReshardReport> reshard(const Checkpoint& source, const std::string& out_dir,
                              const ReshardOptions& options) {
  QR_TRY(ensure_output_dir_is_not_input_dir(out_dir, source.files()));

  ReshardReport report;
  // Views of the source's names and shapes (the source outlives the writer): no copy of them.
  std::vector<TensorView> specs;
  std::vector<TensorRef> refs;
  for (const TensorRef t : source.tensors()) {
    if ((options.select && !options.select->search(t.entry->name)) ||
        (options.drop && options.drop->search(t.entry->name))) {
      ++report.dropped;
      continue;
    }
    specs.push_back({t.entry->name, t.entry->dtype, t.entry->shape});
    refs.push_back(t);
  }
  std::map<std::string, std::string> metadata;
  if (!source.shards().empty()) metadata = source.shards().front().header().metadata;
  QR_ASSIGN_OR_RETURN(plan, plan_shards_view(specs, options.max_shard_bytes, metadata));
  QR_ASSIGN_OR_RETURN(writer, CheckpointWriter::create(out_dir, std::move(plan)));

  std::vector<std::uint8_t> buf(options.buffer_bytes);
  std::vector<std::uint64_t> hashes;
  for (const TensorRef& t : refs) {
    QR_TRY(writer->begin_tensor(t.entry->name));
    QR_ASSIGN_OR_RETURN(h, stream_tensor(source, t, buf, [&](std::span<const std::uint8_t> c) {
                          return writer->append(c);
                        }));
    hashes.push_back(h);
    report.bytes += t.entry->byte_size();
  }
  QR_ASSIGN_OR_RETURN(side, stage_side_files(source.directory(), out_dir));
  for (auto& f : side) {
    report.side_files.push_back(std::filesystem::path(f->name()).filename().string());
    writer->stage(std::move(f));
  }
  QR_TRY(remote::verify_opened_files());  // nothing published from bytes failing their hash
  QR_TRY(writer->finish());
  for (const std::string& name : writer->plan().file_names) {
    report.files.push_back((std::filesystem::path(out_dir) / name).string());
  }
  report.tensors = refs.size();

  // Verify: re-open what was written and compare every tensor's checksum.
  QR_ASSIGN_OR_RETURN(written, Checkpoint::open(out_dir));
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const auto ref = written.find(refs[i].entry->name);
    if (!ref) {
      return Error(ErrorKind::kVerificationFailed, "missing from the written checkpoint")
          .in_file(out_dir)
          .in_tensor(refs[i].entry->name);
    }
    QR_ASSIGN_OR_RETURN(h, stream_tensor(written, *ref, buf, [](std::span<const std::uint8_t>) {
                          return ok_status();
                        }));
    if (h != hashes[i]) {
      return Error(
                 ErrorKind::kVerificationFailed,
                 fmt::format("xxhash64 {:016x} after writing, {:016x} in the source", h, hashes[i]))
          .in_file(written.shards()[ref->shard].path())
          .in_tensor(refs[i].entry->name);
    }
    ++report.verified;
  }
  return report;
}

}  // namespace qrepack
