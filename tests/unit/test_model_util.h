#pragma once
// Helpers for the model/ unit tests: graphs built in code, and a scratch folder.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/batch_axis.h"
#include "model/graph.h"

namespace sluice::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("sluice-model-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A graph under construction.
struct GraphBuilder {
  Graph g;

  GraphBuilder() { g.source = "test"; g.opset = 18; }
  GraphBuilder& input(const std::string& name, Shape shape, DType t = DType::F32) {
    g.inputs.push_back(ValueInfo{name, t, std::move(shape)});
    return *this;
  }
  GraphBuilder& output(const std::string& name) {
    g.outputs.push_back(ValueInfo{name, DType::Undefined, {}});
    return *this;
  }
  GraphBuilder& ints(const std::string& name, std::vector<int64_t> v, bool scalar = false) {
    const Shape s = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    g.constants[name] = Tensor::from(DType::I64, s, v);
    return *this;
  }
  GraphBuilder& floats(const std::string& name, Shape s, std::vector<float> v) {
    g.constants[name] = Tensor::from(DType::F32, std::move(s), v);
    return *this;
  }
  Node& node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
             const std::string& domain = "") {
    Node n;
    n.op = op;
    n.domain = domain;
    n.name = op + "_" + std::to_string(g.nodes.size());
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
};

inline int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

inline const Node* find_op(const Graph& g, const std::string& op) {
  for (const auto& node : g.nodes)
    if (node.op == op) return &node;
  return nullptr;
}

// Deterministic pseudo-random floats in [-1, 1).
inline std::vector<float> ramp(std::size_t n, uint32_t seed = 1) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

// check_batch_axis's refusal of `g` at `batch`, or "" when it takes the graph.
inline std::string batch_refusal(const Graph& g, int64_t batch) {
  try {
    check_batch_axis(g, batch);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace sluice::test
