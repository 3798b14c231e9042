// The text input (text/text_input.h): passages tokenized on the reader threads into int64 planes.
#include "text/text_input.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace sluice {
namespace {

enum class Plane { Ids, Mask, Types, Positions };

class TextInput final : public BatchInput {
 public:
  TextInput(Source& source, int64_t batch, const TextInputOptions& o) : source_(source), batch_(batch), o_(o) {
    if (!source_.encoded() || !source_.text()) SLUICE_THROW("a text input over a source of no passages (", source_.describe(), ")");
    if (!o_.tokenizer) SLUICE_THROW("a text input without a tokenizer");
    if (o_.planes.empty()) SLUICE_THROW("a text input without planes");
    for (const auto& p : o_.planes) {
      if (p == "input_ids") planes_.push_back(Plane::Ids);
      else if (p == "attention_mask") planes_.push_back(Plane::Mask);
      else if (p == "token_type_ids") planes_.push_back(Plane::Types);
      else if (p == "position_ids") planes_.push_back(Plane::Positions);
      else throw UsageError(str("the text input cannot fill a plane '", p, "'"));
    }
    const std::size_t special = o_.tokenizer->special_tokens_added();
    if (o_.length < 1 || static_cast<std::size_t>(o_.length) <= special)
      throw UsageError(str("a passage may have ", o_.length, " tokens, which leaves no room beside the tokenizer's ", special,
                           " special tokens"),
                       "give a larger --max-length");
    row_values_ = static_cast<std::size_t>(o_.length) * planes_.size();
    bytes_ = static_cast<std::size_t>(batch_) * row_values_ * sizeof(int64_t);
    // The empty passage, fed for bad rows and the padding rows of a short last batch.
    text::Encoding enc;
    o_.tokenizer->encode(o_.prompt, enc, text::EncodeOptions{static_cast<std::size_t>(o_.length), true});
    empty_ids_.assign(enc.ids.begin(), enc.ids.begin() + static_cast<std::ptrdiff_t>(std::min(enc.ids.size(), static_cast<std::size_t>(o_.length))));
    if (!o_.buckets.empty() && o_.buckets.lengths.back() != o_.length)
      SLUICE_THROW("token buckets up to ", o_.buckets.lengths.back(), " for passages of ", o_.length, " tokens");
  }

  std::string describe() const override {
    std::string s = str(source_.describe(), ", tokenized by ", o_.tokenizer->describe(), " to ", o_.length, " tokens");
    if (!o_.buckets.empty())
      s += str("; batches cut by length into pieces of at most ", o_.buckets.max_tokens, " tokens (buckets length x rows: ",
               o_.buckets.describe(), ")");
    return s;
  }
  std::size_t slot_bytes() const override { return bytes_; }

  void fill(int64_t first, int64_t count, void* slot, BatchRows& rows) override {
    const auto t0 = std::chrono::steady_clock::now();
    thread_local std::vector<uint8_t> bytes;
    thread_local std::vector<EncodedSample> where;
    thread_local std::string passage;
    thread_local text::Encoding enc;
    const std::size_t need = std::max<std::size_t>(source_.max_encoded_bytes(count), 1);
    if (bytes.size() < need) bytes.resize(need);
    where.assign(static_cast<std::size_t>(count), EncodedSample{});
    source_.read_encoded(first, count, bytes.data(), bytes.size(), where.data());
    const auto t1 = std::chrono::steady_clock::now();
    // Every row's ids first (a bad row: the empty passage), then they are laid out in the slot.
    Scratch& sc = scratch();
    const std::size_t L = static_cast<std::size_t>(o_.length);
    for (int64_t r = 0; r < count; ++r) {
      const EncodedSample& e = where[static_cast<std::size_t>(r)];
      int32_t* ids = sc.ids.data() + static_cast<std::size_t>(r) * L;
      if (!e.error.empty()) {
        rows.mark_bad(r, e.error);
        std::copy(empty_ids_.begin(), empty_ids_.end(), ids);
        sc.lens[static_cast<std::size_t>(r)] = static_cast<int32_t>(empty_ids_.size());
        continue;
      }
      passage.assign(o_.prompt);
      passage.append(reinterpret_cast<const char*>(bytes.data() + e.offset), e.size);
      o_.tokenizer->encode(passage, enc, text::EncodeOptions{L, true});
      const std::size_t n = std::min(enc.ids.size(), L);
      std::copy(enc.ids.begin(), enc.ids.begin() + static_cast<std::ptrdiff_t>(n), ids);
      sc.lens[static_cast<std::size_t>(r)] = static_cast<int32_t>(n);
    }
    for (int64_t r = 0; r < count; ++r) rows.tokens += sc.lens[static_cast<std::size_t>(r)];
    if (o_.buckets.empty()) write_batch(count, slot, sc);
    else cut_batch(count, slot, rows, sc);
    const auto t2 = std::chrono::steady_clock::now();
    tokenize_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count();
    read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }

  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override {
    device.copy_h2d(engine_input, slot, bytes_, StreamKind::Copy);
  }
  double cpu_decode_seconds() const override { return static_cast<double>(tokenize_ns_.load()) * 1e-9; }

 private:
  // A reader thread's scratch, sized for one batch once: every row's ids and token count, and
  // what cutting by length needs (the sort, the cost table and its window).
  struct Scratch {
    std::vector<int32_t> ids, lens;         // [B, L], [B]
    std::vector<int32_t> by_length, bkt;    // counting sort: rows per length; bucket per sorted position
    std::vector<int64_t> cost;              // cost[j]: the cheapest cut of sorted rows [0, j)
    std::vector<int32_t> from, window;      // the last piece of that cut starts at from[j]; the window's rows
    std::vector<BatchPiece> cut;
  };
  Scratch& scratch() const {
    thread_local Scratch sc;
    const std::size_t B = static_cast<std::size_t>(batch_), L = static_cast<std::size_t>(o_.length);
    if (sc.lens.size() < B || sc.ids.size() < B * L) {
      sc.ids.assign(B * L, 0);
      sc.lens.assign(B, 0);
      sc.by_length.assign(L + 2, 0);
      sc.bkt.assign(B, 0);
      sc.cost.assign(B + 1, 0);
      sc.from.assign(B + 1, 0);
      sc.window.assign(B + 1, 0);
      sc.cut.reserve(B);
    }
    if (sc.by_length.size() < L + 2) sc.by_length.assign(L + 2, 0);
    return sc;
  }

  // One tensor [B, planes, L] in row order (no --max-tokens-per-batch); rows count..B-1 of a short
  // last batch are the empty passage.
  void write_batch(int64_t count, void* slot, const Scratch& sc) const {
    auto* dst = static_cast<int64_t*>(slot);
    const std::size_t L = static_cast<std::size_t>(o_.length);
    for (int64_t r = 0; r < batch_; ++r) {
      int64_t* row = dst + static_cast<std::size_t>(r) * row_values_;
      if (r >= count) write_row(empty_ids_.data(), empty_ids_.size(), L, row);
      else write_row(sc.ids.data() + static_cast<std::size_t>(r) * L, static_cast<std::size_t>(sc.lens[static_cast<std::size_t>(r)]), L, row);
    }
  }

  // Batches by length: the rows sorted by token count (a counting sort: stable, ties in input
  // order), cut into pieces, each written padded to its bucket's length.
  //
  // The cut is the cheapest one in padded tokens rather than the first fit: a piece costs its rows
  // x its bucket's length, plus one row at the run's length L for the pass itself (launches, and
  // products too small to run at speed), and holds at most its bucket's cap.  The first fit (take
  // rows while they fit) pads a whole piece to the next bucket for one longer row at its end: 200
  // rows of 30 tokens and one of 33 cost it 201 x 48 tokens, this cut 200 x 32 + 48 (+ L).  The
  // cheapest cut over sorted rows is a table over the row count: cost[j] = min over i of cost[i] +
  // (j - i) * L_b + L, b the bucket of row j - 1, j - i <= cap_b; with the rows of one bucket
  // contiguous, the minimum over its window [j - cap_b, j) is kept by a monotone window, so a batch
  // costs O(B x buckets) at most.  It depends on the batch's passages alone: a resumed run, or
  // another rank count, cuts every batch the same.
  void cut_batch(int64_t count, void* slot, BatchRows& rows, Scratch& sc) const {
    const std::size_t L = static_cast<std::size_t>(o_.length);
    const TokenBuckets& bk = o_.buckets;
    // Counting sort by length.
    std::fill(sc.by_length.begin(), sc.by_length.begin() + static_cast<std::ptrdiff_t>(L + 2), 0);
    for (int64_t r = 0; r < count; ++r) ++sc.by_length[static_cast<std::size_t>(sc.lens[static_cast<std::size_t>(r)]) + 1];
    for (std::size_t n = 1; n < L + 2; ++n) sc.by_length[n] += sc.by_length[n - 1];
    rows.order.resize(static_cast<std::size_t>(count));
    for (int64_t r = 0; r < count; ++r)
      rows.order[static_cast<std::size_t>(sc.by_length[static_cast<std::size_t>(sc.lens[static_cast<std::size_t>(r)])]++)] =
          static_cast<int32_t>(r);
    for (int64_t s = 0; s < count; ++s)
      sc.bkt[static_cast<std::size_t>(s)] = bk.bucket_of(sc.lens[static_cast<std::size_t>(rows.order[static_cast<std::size_t>(s)])]);

    // The cheapest cut.
    const int64_t pass = static_cast<int64_t>(L);
    sc.cost[0] = 0;
    std::size_t head = 0, tail = 0;  // the window: rows i, by increasing cost[i] - i * L_b
    int prev_bucket = -1;
    for (int64_t j = 1; j <= count; ++j) {
      const int b = sc.bkt[static_cast<std::size_t>(j - 1)];
      const int64_t Lb = bk.lengths[static_cast<std::size_t>(b)], cap = bk.caps[static_cast<std::size_t>(b)];
      const int64_t lo = std::max<int64_t>(0, j - cap);
      auto value = [&](int64_t i) { return sc.cost[static_cast<std::size_t>(i)] - i * Lb; };
      auto push = [&](int64_t i) {
        while (tail > head && value(sc.window[tail - 1]) >= value(i)) --tail;
        sc.window[tail++] = static_cast<int32_t>(i);
      };
      if (b != prev_bucket) {  // another length: the window's values change, rebuild it
        head = tail = 0;
        for (int64_t i = lo; i < j - 1; ++i) push(i);
        prev_bucket = b;
      }
      push(j - 1);
      while (sc.window[head] < lo) ++head;
      const int64_t i = sc.window[head];
      sc.cost[static_cast<std::size_t>(j)] = value(i) + j * Lb + pass;
      sc.from[static_cast<std::size_t>(j)] = static_cast<int32_t>(i);
    }
    sc.cut.clear();
    for (int64_t j = count; j > 0;) {
      const int64_t i = sc.from[static_cast<std::size_t>(j)];
      BatchPiece p;
      p.bucket = sc.bkt[static_cast<std::size_t>(j - 1)];
      p.first = i;
      p.rows = j - i;
      sc.cut.push_back(p);
      j = i;
    }
    // In sorted order, packed one after another.
    std::size_t offset = 0;
    auto* base = static_cast<char*>(slot);
    for (auto it = sc.cut.rbegin(); it != sc.cut.rend(); ++it) {
      BatchPiece p = *it;
      const std::size_t Lb = static_cast<std::size_t>(bk.lengths[static_cast<std::size_t>(p.bucket)]);
      const std::size_t row_values = Lb * planes_.size();
      p.offset = offset;
      p.bytes = static_cast<std::size_t>(p.rows) * row_values * sizeof(int64_t);
      auto* dst = reinterpret_cast<int64_t*>(base + offset);
      for (int64_t k = 0; k < p.rows; ++k) {
        const std::size_t r = static_cast<std::size_t>(rows.order[static_cast<std::size_t>(p.first + k)]);
        write_row(sc.ids.data() + r * L, static_cast<std::size_t>(sc.lens[r]), Lb, dst + static_cast<std::size_t>(k) * row_values);
      }
      offset += p.bytes;
      rows.pieces.push_back(p);
    }
  }

  // One row of `n` ids padded to `length`, plane after plane.
  void write_row(const int32_t* ids, std::size_t n, std::size_t length, int64_t* row) const {
    for (std::size_t p = 0; p < planes_.size(); ++p) {
      int64_t* v = row + p * length;
      switch (planes_[p]) {
        case Plane::Ids:
          for (std::size_t i = 0; i < n; ++i) v[i] = ids[i];
          std::fill(v + n, v + length, static_cast<int64_t>(o_.pad_id));
          break;
        case Plane::Mask:
          std::fill(v, v + n, int64_t{1});
          std::fill(v + n, v + length, int64_t{0});
          break;
        case Plane::Types:
          std::fill(v, v + length, int64_t{0});
          break;
        case Plane::Positions:
          for (std::size_t i = 0; i < length; ++i) v[i] = static_cast<int64_t>(i);
          break;
      }
    }
  }

  Source& source_;
  int64_t batch_;
  TextInputOptions o_;
  std::vector<Plane> planes_;
  std::size_t row_values_ = 0, bytes_ = 0;
  std::vector<int32_t> empty_ids_;
  std::atomic<int64_t> tokenize_ns_{0}, read_ns_{0};
};

}  // namespace

int TokenBuckets::bucket_of(int64_t tokens) const {
  const auto it = std::lower_bound(lengths.begin(), lengths.end(), tokens);
  SLUICE_CHECK(it != lengths.end(), "a passage of ", tokens, " tokens is past the longest bucket");
  return static_cast<int>(it - lengths.begin());
}

std::string TokenBuckets::describe() const {
  std::string s;
  for (std::size_t b = 0; b < lengths.size(); ++b) s += str(b ? " " : "", lengths[b], "x", caps[b]);
  return s;
}

TokenBuckets plan_token_buckets(int64_t length, int64_t batch, int64_t max_tokens) {
  TokenBuckets t;
  if (max_tokens == 0) return t;
  if (max_tokens < 0) throw UsageError(str("--max-tokens-per-batch ", max_tokens, " is negative"));
  t.max_tokens = max_tokens;
  // Steps of 16 up to 128 tokens, where most web passages lie and a step is a large share of the
  // length, of 32 up to 256, then of 64: on web-like lengths up to 512 the last step costs 0.2 % of
  // the real tokens' share and saves 4 of 20 engines (docs/text.md, "Batches by length").
  for (int64_t l = 16; l < length; l += l < 128 ? 16 : l < 256 ? 32 : 64) t.lengths.push_back(l);
  t.lengths.push_back(length);
  for (int64_t l : t.lengths) t.caps.push_back(std::min(batch, std::max<int64_t>(1, max_tokens / l)));
  return t;
}

std::unique_ptr<BatchInput> make_text_input(Source& source, int64_t batch, const TextInputOptions& options) {
  return std::make_unique<TextInput>(source, batch, options);
}

}  // namespace sluice
