// Batches by length (text/text_input.h, --max-tokens-per-batch): the buckets planned for a length,
// and the text input's cut of a batch: rows sorted by token count (stable), consecutive pieces
// within their bucket's cap, packed in the slot, each row as the unbucketed slot has it but padded
// only to its bucket, and the cut the cheapest one in padded tokens (checked against every cut of
// the sorted rows by a plain quadratic table).  Passages are random vocabulary words of the text
// zoo's WordPiece tokenizer, 0 to 80 words (truncated at 64 tokens).
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "io/source.h"
#include "nlohmann/json.hpp"
#include "test_io_util.h"
#include "text/text_input.h"
#include "text/tokenizer.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

const std::string kZoo = std::string(SLUICE_SOURCE_DIR) + "/tests/data/text_zoo/bert_mean/";

// A corpus of `n` passages of random words; returns its path.
std::string corpus(TempDir& dir, int n, unsigned seed) {
  std::ifstream tf(kZoo + "tokenizer.json");
  const nlohmann::json tok = nlohmann::json::parse(tf);
  std::vector<std::string> words;
  for (const auto& kv : tok.at("model").at("vocab").items()) {
    const std::string& w = kv.key();
    bool alpha = w.size() > 2;
    for (char c : w) alpha = alpha && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    if (alpha) words.push_back(w);
  }
  std::mt19937 rng(seed);
  const std::string path = dir.file("c.jsonl");
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    // Mostly short passages, some long ones, a few empty: several per bucket, ties of length.
    const int count = static_cast<int>(rng() % 4 == 0 ? rng() % 81 : rng() % 20);
    std::string text;
    for (int k = 0; k < count; ++k) text += (k ? " " : "") + words[rng() % words.size()];
    f << nlohmann::json{{"text", text}}.dump() << "\n";
  }
  return path;
}

int64_t cheapest_cut(const std::vector<int64_t>& sorted_lengths, const TokenBuckets& b, int64_t L) {
  const std::size_t n = sorted_lengths.size();
  std::vector<int64_t> cost(n + 1, INT64_MAX);
  cost[0] = 0;
  for (std::size_t j = 1; j <= n; ++j) {
    const int bk = b.bucket_of(sorted_lengths[j - 1]);
    for (std::size_t i = 0; i < j; ++i)
      if (static_cast<int64_t>(j - i) <= b.caps[static_cast<std::size_t>(bk)])
        cost[j] = std::min(cost[j], cost[i] + static_cast<int64_t>(j - i) * b.lengths[static_cast<std::size_t>(bk)] + L);
  }
  return cost[n];
}

}  // namespace

TEST(TextBuckets, Plan) {
  const TokenBuckets t = plan_token_buckets(512, 1024, 16384);
  const std::vector<int64_t> lengths = {16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512};
  EXPECT_EQ(t.lengths, lengths);
  EXPECT_EQ(t.caps.front(), 1024);   // 16384 / 16 = 1024 = B
  EXPECT_EQ(t.caps[1], 512);
  EXPECT_EQ(t.caps[12], 51);         // 16384 / 320
  EXPECT_EQ(t.caps.back(), 32);
  EXPECT_EQ(t.bucket_of(0), 0);
  EXPECT_EQ(t.bucket_of(16), 0);
  EXPECT_EQ(t.bucket_of(17), 1);
  EXPECT_EQ(t.bucket_of(129), 8);
  EXPECT_EQ(t.bucket_of(257), 12);
  EXPECT_EQ(t.bucket_of(512), 15);
  EXPECT_TRUE(plan_token_buckets(512, 8, 0).empty());
  // A budget below a bucket's length still runs its passages, one a piece.
  EXPECT_EQ(plan_token_buckets(64, 8, 20).caps, (std::vector<int64_t>{1, 1, 1, 1}));
  // A length that is no multiple of the step ends on itself.
  EXPECT_EQ(plan_token_buckets(100, 8, 400).lengths, (std::vector<int64_t>{16, 32, 48, 64, 80, 96, 100}));
  EXPECT_EQ(plan_token_buckets(300, 8, 400).lengths.back(), 300);
  EXPECT_EQ(plan_token_buckets(300, 8, 400).lengths.size(), 13u);  // ..., 224, 256, 300
  EXPECT_THROW(plan_token_buckets(64, 8, -1), UsageError);
}

TEST(TextBuckets, CutsSortedPackedCheapestAndAsTheFullSlot) {
  TempDir dir;
  const std::string path = corpus(dir, 203, 7);
  TextOptions so;
  auto source = open_text_source(path, "jsonl", so, 0);
  const int64_t L = 64;
  const std::vector<std::string> planes = {"input_ids", "attention_mask", "token_type_ids", "position_ids"};
  const std::size_t P = planes.size();
  for (const auto& [B, T] : std::vector<std::pair<int64_t, int64_t>>{{16, 128}, {32, 512}, {64, 4096}, {50, 100}}) {
    TextInputOptions full;
    full.tokenizer = text::Tokenizer::load(kZoo + "tokenizer.json");
    full.planes = planes;
    full.length = L;
    full.pad_id = 0;
    TextInputOptions cut = full;
    cut.buckets = plan_token_buckets(L, B, T);
    auto plain = make_text_input(*source, B, full);
    auto pieces = make_text_input(*source, B, cut);
    ASSERT_EQ(plain->slot_bytes(), pieces->slot_bytes());
    std::vector<int64_t> a(plain->slot_bytes() / 8), b(pieces->slot_bytes() / 8);
    int64_t many = 0;  // batches holding two pieces of one bucket
    for (int64_t first = 0; first < source->size(); first += B) {
      const int64_t count = std::min(B, source->size() - first);
      BatchRows ra, rb;
      ra.reset(B, false);
      rb.reset(B, false);
      plain->fill(first, count, a.data(), ra);
      pieces->fill(first, count, b.data(), rb);
      EXPECT_TRUE(ra.pieces.empty());
      EXPECT_EQ(ra.tokens, rb.tokens);
      ASSERT_EQ(rb.order.size(), static_cast<std::size_t>(count));
      // Token counts from the unbucketed slot's mask plane.
      std::vector<int64_t> len(static_cast<std::size_t>(count));
      for (int64_t r = 0; r < count; ++r)
        for (int64_t i = 0; i < L; ++i) len[static_cast<std::size_t>(r)] += a[static_cast<std::size_t>((r * P + 1) * L + i)];
      // Sorted, ties in input order.
      std::vector<int64_t> sorted;
      for (int64_t s = 0; s < count; ++s) {
        const int32_t r = rb.order[static_cast<std::size_t>(s)];
        sorted.push_back(len[static_cast<std::size_t>(r)]);
        if (s > 0) {
          const int32_t q = rb.order[static_cast<std::size_t>(s - 1)];
          ASSERT_TRUE(len[static_cast<std::size_t>(q)] < len[static_cast<std::size_t>(r)] ||
                      (len[static_cast<std::size_t>(q)] == len[static_cast<std::size_t>(r)] && q < r));
        }
      }
      // Consecutive pieces within their caps, packed, the bucket their longest row's.
      int64_t next = 0, cost = 0;
      std::size_t offset = 0;
      for (std::size_t k = 0; k < rb.pieces.size(); ++k) {
        const BatchPiece& p = rb.pieces[k];
        const int64_t Lb = cut.buckets.lengths[static_cast<std::size_t>(p.bucket)];
        EXPECT_EQ(p.first, next);
        EXPECT_GE(p.rows, 1);
        EXPECT_LE(p.rows, cut.buckets.caps[static_cast<std::size_t>(p.bucket)]);
        EXPECT_EQ(p.bucket, cut.buckets.bucket_of(sorted[static_cast<std::size_t>(p.first + p.rows - 1)]));
        EXPECT_EQ(p.offset, offset);
        EXPECT_EQ(p.bytes, static_cast<std::size_t>(p.rows) * P * static_cast<std::size_t>(Lb) * 8);
        if (k > 0 && rb.pieces[k - 1].bucket == p.bucket) ++many;
        // Each row as the unbucketed slot has it, its first L_b tokens of each plane.
        for (int64_t j = 0; j < p.rows; ++j) {
          const int64_t r = rb.order[static_cast<std::size_t>(p.first + j)];
          for (std::size_t q = 0; q < P; ++q)
            for (int64_t i = 0; i < Lb; ++i)
              ASSERT_EQ(b[offset / 8 + static_cast<std::size_t>(j) * P * static_cast<std::size_t>(Lb) + q * static_cast<std::size_t>(Lb) + static_cast<std::size_t>(i)],
                        a[static_cast<std::size_t>((r * static_cast<int64_t>(P) + static_cast<int64_t>(q)) * L + i)])
                  << "row " << r << " plane " << q << " token " << i;
        }
        next += p.rows;
        offset += p.bytes;
        cost += p.rows * Lb + L;
      }
      EXPECT_EQ(next, count);
      EXPECT_EQ(cost, cheapest_cut(sorted, cut.buckets, L)) << "B " << B << " T " << T << " batch at " << first;
    }
    if (T <= 128) EXPECT_GT(many, 0) << "the corpus should put two pieces of one bucket in a batch";
  }
}
