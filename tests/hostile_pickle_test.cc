// Hand-made pickles of every class a hostile .pt has used against the reader: each must be
// refused with its own rule through the CLI (one line, exit 2), quickly, without a crash, a
// leak (LeakSanitizer runs at the CLI's exit) or an allocation the file does not justify.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pickle_input.h"
#include "qrepack/io/torch_pt.h"
#include "test_util.h"

namespace qrepack {
namespace {

using Bytes = std::vector<std::uint8_t>;

void add(Bytes& b, std::initializer_list<std::uint8_t> ops) { b.insert(b.end(), ops); }
void add(Bytes& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }
void binunicode(Bytes& b, const std::string& s) {
  b.push_back('X');
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::uint8_t>(s.size() >> (8 * i)));
  add(b, s);
}

// A .pt whose data.pkl is `pickle` and whose storage records have the given byte sizes.
std::string write_pt(const testing::TempDir& dir, const std::string& name, const Bytes& pickle,
                     const std::vector<std::uint32_t>& storages = {}) {
  Bytes input{static_cast<std::uint8_t>(storages.size())};
  for (std::uint32_t s : storages) {
    for (int i = 0; i < 4; ++i) input.push_back(static_cast<std::uint8_t>(s >> (8 * i)));
  }
  input.insert(input.end(), pickle.begin(), pickle.end());
  const auto path = dir / name;
  testing::write_bytes(path, fuzz::pickle_input_to_pt(input));
  return path.string();
}

struct Outcome {
  testing::CliResult r;
  double seconds;
};
Outcome validate(const std::string& pt) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = testing::run_cli({"validate", pt});
  return {r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

void expect_refused(const Outcome& o, const std::string& rule) {
  EXPECT_EQ(o.r.exit_code, 2) << o.r.err;
  EXPECT_NE(o.r.err.find("rule " + rule), std::string::npos) << o.r.err;
  EXPECT_EQ(std::count(o.r.err.begin(), o.r.err.end(), '\n'), 1) << o.r.err;
  EXPECT_LT(o.seconds, 20.0);  // generous for sanitizers; the broken reader never returned
}

// _rebuild_tensor_v2(storage key 0 of FloatStorage with `numel`, offset 0, size, stride).
void tensor(Bytes& b, std::uint64_t numel, const std::vector<int>& size,
            const std::vector<int>& stride) {
  add(b, "ctorch._utils\n_rebuild_tensor_v2\n(");
  add(b, {'('});
  binunicode(b, "storage");
  add(b, "ctorch\nFloatStorage\n");
  binunicode(b, "0");
  binunicode(b, "cpu");
  b.push_back('J');
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::uint8_t>(numel >> (8 * i)));
  add(b, {'t', 'Q', 'K', 0});
  for (const auto* v : {&size, &stride}) {
    add(b, {'('});
    for (int x : *v) add(b, {'K', static_cast<std::uint8_t>(x)});
    add(b, {'t'});
  }
  add(b, {0x89, '}', 't', 'R'});
}

class HostilePickle : public ::testing::Test {
 protected:
  testing::TempDir dir;
};

TEST_F(HostilePickle, DeepNestingIsRefusedAndFreedWithoutRecursion) {
  Bytes p{0x80, 2};
  for (int i = 0; i < 300'000; ++i) p.push_back(']');
  for (int i = 0; i < 300'000 - 1; ++i) p.push_back('a');
  p.push_back('.');
  expect_refused(validate(write_pt(dir, "deep.pt", p)), "pickle.max_depth");
}

TEST_F(HostilePickle, MemoSharingCannotMakeTheWalkExponential) {
  // L0 = []; L(i+1) = [Li, Li] through BINPUT/BINGET: 2^60 paths in a few hundred bytes.
  Bytes p{0x80, 2, ']', 'q', 0};
  for (int i = 0; i < 60; ++i) {
    add(p, {']', 'h', static_cast<std::uint8_t>(i), 'a', 'h', static_cast<std::uint8_t>(i), 'a',
            'q', static_cast<std::uint8_t>(i + 1)});
  }
  p.push_back('.');
  ASSERT_LT(p.size(), 1024u);
  expect_refused(validate(write_pt(dir, "bomb.pt", p)), "pickle.max_tree_nodes");
}

TEST_F(HostilePickle, TupleOpcodesCannotReachBelowAMark) {
  for (int op : {0x85, 0x86, 0x87}) {
    const Bytes p{0x80, 2, 'K', 1, 'K', 2, 'K', 3, '(', static_cast<std::uint8_t>(op), '.'};
    expect_refused(validate(write_pt(dir, "tuple.pt", p)), "pickle.structure");
  }
}

TEST_F(HostilePickle, AListContainingItselfIsRefusedAndFreed) {
  const Bytes p{0x80, 2, ']', 'q', 0, 'h', 0, 'a', '.'};
  expect_refused(validate(write_pt(dir, "cycle.pt", p)), "pickle.max_depth");
}

// The pickle of a list `batches` x `per_batch` items long, built by `prefix` and filled by
// MARK, `per_batch` x `item`, APPENDS, repeated.
Bytes appends_flood(Bytes prefix, const Bytes& item, int batches, int per_batch) {
  for (int b = 0; b < batches; ++b) {
    prefix.push_back('(');
    for (int i = 0; i < per_batch; ++i) prefix.insert(prefix.end(), item.begin(), item.end());
    prefix.push_back('e');
  }
  prefix.push_back('.');
  return prefix;
}

TEST_F(HostilePickle, AListAppendedToItselfTenMillionTimesIsRefusedAtTheFirstAppends) {
  // L = []; L.extend([L] * 1000), ten thousand times: 20 MB that held a reader for over 30 s
  // and 4 GB, building the list and then walking it width x depth, before it was killed.
  const Bytes prefix{0x80, 2, ']', 'q', 0};
  const Bytes p = appends_flood(prefix, {'h', 0}, 10'000, 1000);
  ASSERT_GT(p.size(), 20'000'000u);
  const Outcome o = validate(write_pt(dir, "flood.pt", p));
  expect_refused(o, "pickle.max_depth");
  // At the first APPENDS, as the opcodes run: nothing is built or walked first.
  const std::size_t first_appends = prefix.size() + 1 + 2 * 1000;
  EXPECT_NE(o.r.err.find("rule pickle.max_depth, byte " + std::to_string(first_appends)),
            std::string::npos)
      << o.r.err;
}

TEST_F(HostilePickle, ADictSetAsItsOwnValueIsRefusedWhereItIsSet) {
  for (const std::uint8_t op : {'s', 'u'}) {  // d["k"] = d by SETITEM, then by SETITEMS
    Bytes p{0x80, 2, '}', 'q', 0};
    if (op == 'u') p.push_back('(');
    binunicode(p, "k");
    add(p, {'h', 0});
    const std::size_t at = p.size();
    add(p, {op, '.'});
    const Outcome o = validate(write_pt(dir, "dict_cycle.pt", p));
    expect_refused(o, "pickle.max_depth");
    EXPECT_NE(o.r.err.find("byte " + std::to_string(at)), std::string::npos) << o.r.err;
  }
}

TEST_F(HostilePickle, AWideListInACycleIsRefusedWhereTheWalkMeetsItAgain) {
  // A = []; B = [A]; A.extend([B] * 1'000'000): a million-wide list at every other level of an
  // endless nesting. The walk stops at the first repeat, holding only the path to it.
  const Bytes p =
      appends_flood({0x80, 2, ']', 'q', 0, ']', 'q', 1, 'h', 0, 'a', 'h', 0}, {'h', 1}, 1000, 1000);
  const Outcome o = validate(write_pt(dir, "cycle_pair.pt", p));
  expect_refused(o, "pickle.max_depth");
  EXPECT_NE(o.r.err.find("a list contains itself"), std::string::npos) << o.r.err;
}

TEST_F(HostilePickle, ADictKeySetTwiceIsRefused) {
  Bytes p{0x80, 2, '}'};
  for (int i = 0; i < 2; ++i) {
    binunicode(p, "k");
    add(p, {'K', static_cast<std::uint8_t>(i), 's'});
  }
  p.push_back('.');
  expect_refused(validate(write_pt(dir, "dup.pt", p)), "pickle.duplicate_key");
}

TEST_F(HostilePickle, AViewRepeatingOneElementIsNotMaterialised) {
  // A [200, 200, 200] view with zero strides over one f32: in bounds, 32 MB if read.
  Bytes p{0x80, 2, '}'};
  binunicode(p, "w");
  tensor(p, 1, {200, 200, 200}, {0, 0, 0});
  add(p, {'s', '.'});
  expect_refused(validate(write_pt(dir, "zero_stride.pt", p, {4})), "pt.view_size");
}

TEST_F(HostilePickle, ATensorSharedByManyKeysIsCappedByTheFileSize) {
  // One 64 KiB tensor referenced by 4096 keys: 256 MiB of views from a file of ~100 KiB.
  Bytes p{0x80, 2, '}'};
  binunicode(p, "k0");
  tensor(p, 16384, {128, 128}, {128, 1});
  add(p, {'r', 0, 0, 0, 0, 's'});
  for (int i = 1; i < 4096; ++i) {
    binunicode(p, "k" + std::to_string(i));
    add(p, {'j', 0, 0, 0, 0, 's'});
  }
  p.push_back('.');
  expect_refused(validate(write_pt(dir, "shared.pt", p, {65536})), "pt.max_view_bytes");
}

TEST_F(HostilePickle, TiedTensorsStillLoad) {
  Bytes p{0x80, 2, '}'};
  binunicode(p, "a");
  tensor(p, 4, {4}, {1});
  add(p, {'q', 0, 's'});
  binunicode(p, "b");
  add(p, {'h', 0, 's', '.'});
  auto f = TorchFile::open(write_pt(dir, "tied.pt", p, {16}));
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->root().get("a"), f->root().get("b"));
}

}  // namespace
}  // namespace qrepack
