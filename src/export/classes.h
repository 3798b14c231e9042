#pragma once
// Classification results as one CSV table: key, the top-k class ids, their names (with a labels
// file) and their probabilities, largest first.
//
// Where the probabilities come from, best first: a topk_probs output (softmax then top-k on the
// device), a softmax output, or logits (softmax computed here, in double precision).  A topk output
// alone holds logits, not probabilities: its table has logit_* columns instead of prob_*.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sluice {

struct TopK {
  std::vector<int64_t> ids;
  std::vector<double> values;
};

// The k largest of `scores` (n values; any float type, at `offset` in t), largest first, the lower
// class first among equals.  With `softmax`, the values are exp(s - max) / sum over all n first.
TopK top_k_of(const Tensor& t, std::size_t offset, std::size_t n, std::size_t k, bool softmax);

// Stored top-k rows: values [N, k] (float) and indices [N, k] (int32/int64), row `row`.
TopK stored_top_k(const Tensor& values, const Tensor& indices, int64_t row, std::size_t k);

// One class name per line (line i names class i), '\r' dropped.  InputError naming the file.
std::vector<std::string> read_labels(const std::string& path);

// A CSV field (RFC 4180): quoted when it holds a comma, quote, CR or LF, quotes doubled.
std::string csv_field(const std::string& s);

// "key,class_1,...,class_k[,label_1,...,label_k],prob_1,...,prob_k" (value_name: "prob" or "logit").
std::string csv_header(std::size_t k, bool labels, const std::string& value_name);
// One line of the table; InputError when a class has no label.
std::string csv_row(const std::string& key, const TopK& t, const std::vector<std::string>* labels);

}  // namespace sluice
