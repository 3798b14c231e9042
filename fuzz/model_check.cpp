// What the ONNX targets (onnx_target.cpp, graph_target.cpp) do with one model: load it from
// bytes, prepare it with a small batch, send the prepared structure through the trip to the other
// ranks (serialize_structure and back) and, when its tensors are small, run one forward pass on the
// CPU engine.  Bad models must end in a usage or input error (fuzz_util.h); a model that prepares
// must also run.
#include "model_check.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "fuzz_util.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#include "model/serialize.h"

namespace sluice::fuzz {

namespace {

// The job's sample shape: the model's own when it is static and small, else [3, 4, 4], so the
// seeds (x [N, 3, 4, 4]) and the exports of the repository both get past the input check.
Shape sample_shape_for(const Graph& g) {
  if (g.inputs.size() == 1 && g.inputs[0].shape.size() >= 2) {
    Shape s(g.inputs[0].shape.begin() + 1, g.inputs[0].shape.end());
    bool small = s.size() <= 5;
    for (int64_t d : s) small = small && d >= 1 && d <= 64;
    if (small) return s;
  }
  return {3, 4, 4};
}

// Bytes of every tensor of a prepared graph: the CPU engine allocates about that much.
std::size_t graph_bytes(const Graph& g) {
  std::size_t n = 0;
  for (const auto& kv : g.values) n += kv.second.bytes();
  return n;
}

void run_prepared(const Graph& g) {
  const Graph copy = deserialize_structure(serialize_structure(g));
  if (copy.nodes.size() != g.nodes.size() || copy.outputs.size() != g.outputs.size())
    finding("serialize_structure does not round-trip", g.summary());
  if (graph_bytes(g) > (std::size_t(16) << 20)) return;  // big activations: slow, and not what we look for
  EngineOptions eo;
  eo.threads = 1;
  eo.io_sets = 1;
  std::unique_ptr<Engine> engine = create_cpu_engine(g, eo);
  std::memset(engine->input_buffer(0), 0, engine->input().bytes());  // deterministic runs
  engine->forward(0, nullptr);
}

}  // namespace

void check_model(const std::string& bytes, unsigned heads) {
  try {
    Graph g = load_onnx_bytes(bytes, (scratch_dir() / "model.onnx").string());
    PrepareOptions o;
    o.batch_size = 2;
    o.sample_shape = sample_shape_for(g);
    o.input_dtype = (heads & 8) ? DType::U8 : DType::F32;
    o.normalize = (heads & 16) != 0;
    o.outputs.push_back({"logits", OutputSpec::Kind::Logits, (heads & 32) ? DType::F16 : DType::F32, 0});
    if (heads & 1) o.outputs.push_back({"argmax", OutputSpec::Kind::ArgMax, DType::Undefined, 0});
    if (heads & 2) o.outputs.push_back({"softmax", OutputSpec::Kind::Softmax, DType::F32, 0});
    if (heads & 4) o.outputs.push_back({"topk", OutputSpec::Kind::TopK, DType::F32, 2});
    run_prepared(prepare_graph(std::move(g), o));
  } catch (const Error& e) {
    check_error_kind(e);
  } catch (const std::exception& e) {
    finding("a std:: exception", e.what());
  }
}

}  // namespace sluice::fuzz
