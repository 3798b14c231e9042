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
    empty_ = encode_row("");
  }

  std::string describe() const override {
    return str(source_.describe(), ", tokenized by ", o_.tokenizer->describe(), " to ", o_.length, " tokens");
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
    auto* dst = static_cast<int64_t*>(slot);
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < batch_; ++r) {
      int64_t* row = dst + static_cast<std::size_t>(r) * row_values_;
      if (r >= count) {
        std::copy(empty_.begin(), empty_.end(), row);
        continue;
      }
      const EncodedSample& e = where[static_cast<std::size_t>(r)];
      if (!e.error.empty()) {
        rows.mark_bad(r, e.error);
        std::copy(empty_.begin(), empty_.end(), row);
        continue;
      }
      passage.assign(o_.prompt);
      passage.append(reinterpret_cast<const char*>(bytes.data() + e.offset), e.size);
      o_.tokenizer->encode(passage, enc, text::EncodeOptions{static_cast<std::size_t>(o_.length), true});
      write_row(enc, row);
    }
    const auto t2 = std::chrono::steady_clock::now();
    tokenize_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count();
    read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }

  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override {
    device.copy_h2d(engine_input, slot, bytes_, StreamKind::Copy);
  }
  double cpu_decode_seconds() const override { return static_cast<double>(tokenize_ns_.load()) * 1e-9; }

 private:
  std::vector<int64_t> encode_row(const std::string& text) const {
    text::Encoding enc;
    o_.tokenizer->encode(o_.prompt + text, enc, text::EncodeOptions{static_cast<std::size_t>(o_.length), true});
    std::vector<int64_t> row(row_values_);
    write_row(enc, row.data());
    return row;
  }

  void write_row(const text::Encoding& enc, int64_t* row) const {
    const std::size_t L = static_cast<std::size_t>(o_.length);
    const std::size_t n = std::min(enc.ids.size(), L);
    for (std::size_t p = 0; p < planes_.size(); ++p) {
      int64_t* v = row + p * L;
      switch (planes_[p]) {
        case Plane::Ids:
          for (std::size_t i = 0; i < n; ++i) v[i] = enc.ids[i];
          std::fill(v + n, v + L, static_cast<int64_t>(o_.pad_id));
          break;
        case Plane::Mask:
          std::fill(v, v + n, int64_t{1});
          std::fill(v + n, v + L, int64_t{0});
          break;
        case Plane::Types:
          std::fill(v, v + L, int64_t{0});
          break;
        case Plane::Positions:
          for (std::size_t i = 0; i < L; ++i) v[i] = static_cast<int64_t>(i);
          break;
      }
    }
  }

  Source& source_;
  int64_t batch_;
  TextInputOptions o_;
  std::vector<Plane> planes_;
  std::size_t row_values_ = 0, bytes_ = 0;
  std::vector<int64_t> empty_;
  std::atomic<int64_t> tokenize_ns_{0}, read_ns_{0};
};

}  // namespace

std::unique_ptr<BatchInput> make_text_input(Source& source, int64_t batch, const TextInputOptions& options) {
  return std::make_unique<TextInput>(source, batch, options);
}

}  // namespace sluice
