#include "export/classes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "core/error.h"

namespace sluice {

namespace {

double value_at(const Tensor& t, std::size_t i) {
  switch (t.dtype) {
    case DType::F32: return t.data<float>()[i];
    case DType::F16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DType::BF16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::F64: return t.data<double>()[i];
    default: throw InputError(str("export: cannot read ", dtype_name(t.dtype), " values as scores"));
  }
}

int64_t index_at(const Tensor& t, std::size_t i) {
  switch (t.dtype) {
    case DType::I32: return t.data<int32_t>()[i];
    case DType::I64: return t.data<int64_t>()[i];
    case DType::U8: return t.data<uint8_t>()[i];
    default: throw InputError(str("export: cannot read ", dtype_name(t.dtype), " values as class ids"));
  }
}

}  // namespace

TopK top_k_of(const Tensor& t, std::size_t offset, std::size_t n, std::size_t k, bool softmax) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_at(t, offset + i);
  if (softmax) {
    const double top = *std::max_element(v.begin(), v.end());
    double sum = 0;
    for (double& x : v) sum += (x = std::exp(x - top));
    for (double& x : v) x /= sum;
  }
  k = std::min(k, n);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), [&](int64_t a, int64_t b) {
    return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(b)] ||
           (v[static_cast<std::size_t>(a)] == v[static_cast<std::size_t>(b)] && a < b);
  });
  TopK r;
  for (std::size_t i = 0; i < k; ++i) {
    r.ids.push_back(order[i]);
    r.values.push_back(v[static_cast<std::size_t>(order[i])]);
  }
  return r;
}

TopK stored_top_k(const Tensor& values, const Tensor& indices, int64_t row, std::size_t k) {
  const std::size_t width = static_cast<std::size_t>(values.shape.at(1));
  k = std::min(k, width);
  TopK r;
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t at = static_cast<std::size_t>(row) * width + i;
    r.ids.push_back(index_at(indices, at));
    r.values.push_back(value_at(values, at));
  }
  return r;
}

std::vector<std::string> read_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(str("export: cannot read the labels file ", path));
  std::vector<std::string> labels;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(line);
  }
  if (labels.empty()) throw InputError(str("export: the labels file ", path, " is empty (one class name per line)"));
  return labels;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_header(std::size_t k, bool labels, const std::string& value_name) {
  std::string h = "key";
  for (std::size_t i = 1; i <= k; ++i) h += str(",class_", i);
  if (labels)
    for (std::size_t i = 1; i <= k; ++i) h += str(",label_", i);
  for (std::size_t i = 1; i <= k; ++i) h += str(",", value_name, "_", i);
  return h + "\n";
}

std::string csv_row(const std::string& key, const TopK& t, const std::vector<std::string>* labels) {
  std::string line = csv_field(key);
  for (int64_t id : t.ids) line += str(",", id);
  if (labels)
    for (int64_t id : t.ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= labels->size())
        throw InputError(str("export: class ", id, " has no name in the labels file (", labels->size(), " names)"));
      line += "," + csv_field((*labels)[static_cast<std::size_t>(id)]);
    }
  char buf[32];
  for (double v : t.values) {
    std::snprintf(buf, sizeof buf, ",%.9g", v);  // float32 values survive the round trip
    line += buf;
  }
  return line + "\n";
}

}  // namespace sluice
