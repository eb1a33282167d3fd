#include "model/deepseek_v4_engram.h"

#include <gtest/gtest.h>

namespace qrepack::model {
namespace {

// Bigrams over two heads (primes 7 and 11, the second head's rows after the first's 7). The
// second multiplier is 2^63 + 1: times token 1 it wraps to a negative int64, and the XOR with
// 2 * 3 = 6 gives -(2^63 - 7). 2^63 is 1 mod 7 (2^3 = 8) and 8 mod 11 (2^10 = 1024), so that
// value is -1 mod both: buckets 6 and 10, where a truncating remainder would give -1.
TEST(DeepseekV4Engram, HashWrapsAsInt64AndTakesTheFloorRemainder) {
  DsEngram e;
  e.max_ngram = 2;
  e.heads = 2;
  e.head_dim = 32;
  e.pad_id = 0;
  e.token_map = {0, 1, 2, 3};
  DsEngramTable t;
  t.rows = 18;
  t.primes = {7, 11};
  t.offsets = {0, 7};
  t.multipliers = {3, (std::uint64_t{1} << 63) + 1};
  const std::vector<std::uint32_t> ids = {1, 2};
  // Position 0: (1, pad 0) -> 3 ^ 0 = 3: rows 3 and 7 + 3.
  // Position 1: (2, 1) -> 6 ^ (2^63 + 1) = -(2^63 - 7): rows 6 and 7 + 10.
  EXPECT_EQ(engram_row_ids(e, t, ids), (std::vector<std::uint64_t>{3, 10, 6, 17}));
}

// Trigrams: the lookback before the first position is the pad id, and once a lookback is
// padded every older one is too; the running XOR gives one bucket per lookback.
TEST(DeepseekV4Engram, EachLookbackHasItsOwnBucketsAndPadsBeforeTheStart) {
  DsEngram e;
  e.max_ngram = 3;
  e.heads = 1;
  e.head_dim = 32;
  e.pad_id = 5;
  e.token_map = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  DsEngramTable t;
  t.rows = 97 + 1009;
  t.primes = {97, 1009};
  t.offsets = {0, 97};
  t.multipliers = {1, 10, 100};
  const std::vector<std::uint32_t> ids = {9, 8};
  // Position 0: tokens (9, 5, 5): 9 ^ 50 = 59; 59 ^ 500 = 463.
  // Position 1: tokens (8, 9, 5): 8 ^ 90 = 82; 82 ^ 500 = 422.
  EXPECT_EQ(engram_row_ids(e, t, ids), (std::vector<std::uint64_t>{59, 97 + 463, 82, 97 + 422}));
}

}  // namespace
}  // namespace qrepack::model
