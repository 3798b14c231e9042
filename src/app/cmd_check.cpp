// `sluice check --model M`: before any job, whether a model runs on each engine, in one screen.
//
//   model  the file, its opset, its input
//   ops    every op type and how many nodes use it
//   cpu    runs, or refused with the ops and nodes the engine lacks (or the first error it gives)
//   cuda   the same; "not built" in a build without the CUDA backend
//
// The verdict for an engine comes from preparing the model the way a job does (its own input shape,
// at its own batch) and building that engine on it: the CPU engine always (it needs no device), the
// CUDA engine when a GPU is visible; without one, the CUDA engine's op registry decides.  Exit status
// 0 when the model runs on an engine of this build (--device picks one), 3 when it is refused.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/cpu/kernel.h"
#include "engine/engine.h"
#include "model/canonicalize.h"
#include "model/graph_util.h"
#include "model/onnx_loader.h"
#include "model/op_arity.h"
#include "model/prepare.h"
#include "pipeline/gpu_count.h"

#ifdef SLUICE_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace sluice {

namespace {

struct CheckOptions {
  std::string model;
  std::vector<int64_t> sample_shape;
  std::string device = "any";
};

struct Verdict {
  bool runs = false;
  std::string text;  // the line after the engine's name
};

constexpr std::size_t kNodesShown = 3;

// "Col2Im (1 node: 'node_col2im'), Foo (4 nodes: 'a', 'b', 'c', ...)"
std::string ops_with_nodes(const std::map<std::string, std::vector<std::string>>& missing) {
  std::string s;
  for (const auto& [op, nodes] : missing) {
    std::string names;
    for (std::size_t i = 0; i < nodes.size() && i < kNodesShown; ++i) names += str(i ? ", " : "", "'", nodes[i], "'");
    if (nodes.size() > kNodesShown) names += ", ...";
    s += str(s.empty() ? "" : ", ", op, " (", nodes.size(), nodes.size() == 1 ? " node: " : " nodes: ", names, ")");
  }
  return s;
}

// The keys of an engine's op registry ("Conv", "sluice.FusedConv"; engine/cpu/registry.cpp,
// engine/cuda/builder.cpp).
std::set<std::string> engine_registry(const std::string& engine) {
  std::vector<std::string> keys;
  if (engine == "cpu") keys = cpu::cpu_kernel_ops();
#ifdef SLUICE_HAVE_CUDA
  if (engine == "cuda") keys = cuda::implemented_ops();
#endif
  return {keys.begin(), keys.end()};
}

// The prepared graph's ops that an engine's registry lacks.
std::map<std::string, std::vector<std::string>> lacking(const Graph& g, const std::set<std::string>& registry) {
  std::map<std::string, std::vector<std::string>> out;
  for (const Node& n : g.nodes) {
    const std::string key = op_key(n.domain, n.op);
    if (!registry.count(key)) out[key].push_back(n.name);
  }
  return out;
}

Verdict engine_verdict(const std::string& engine, const Graph& g, int64_t opset, bool build) {
  const auto missing = lacking(g, engine_registry(engine));
  if (!missing.empty())
    return {false, str("refused: the ", engine, " engine lacks ", ops_with_nodes(missing), " (opset ", opset, ")")};
  if (!build) return {true, "runs (every op is in the engine's registry; no GPU here to build it on)"};
  try {
    EngineOptions eo;
    eo.io_sets = 1;
    eo.threads = 1;
    eo.cuda_graphs = false;
    const std::unique_ptr<Engine> e = create_engine(engine, g, eo);
    return {true, str("runs (", g.nodes.size(), " nodes once prepared)")};
  } catch (const Error& e) {
    return {false, str("refused: ", e.what())};
  }
}

// The model's input fixes its batch b (an export at batch 1): a job at another --batch-size prepares
// it at b and re-specializes it (model/batch_adapt.h) or runs it on sub-batches of b.  Tried at 2b,
// which takes every re-specialization a larger batch does.
std::string static_batch_line(Graph model, PrepareOptions po) {
  const int64_t b = po.batch_size;
  po.batch_size = 2 * b;
  po.static_batch = StaticBatch::Respecialize;
  const LogLevel level = log_level();
  if (level < LogLevel::Warn) set_log_level(LogLevel::Warn);  // this line says what the log would
  try {
    prepare_graph(std::move(model), po);
    set_log_level(level);
  } catch (const Error& e) {
    set_log_level(level);
    std::string why = e.what();
    const std::string lead = " and cannot be re-specialized to " + std::to_string(2 * b) + ": ";
    const std::size_t at = why.find(lead);
    if (at != std::string::npos) why = why.substr(at + lead.size());
    return str("fixed at ", b, " in the model and not re-specialized to a job's --batch-size (", why, "); a job runs ",
               "each batch as sub-batches of ", b, " (at --batch-size ", 256 * b, ", ", 256, " of them): ",
               sub_batch_cost(b, 256 * b), "; ", dynamic_batch_export_hint());
  }
  return str("fixed at ", b, " in the model; re-specialized to a job's --batch-size (every op keeps the samples apart)");
}

int check_command(const CheckOptions& o) {
  const ModelOps ops = read_model_ops(o.model);
  std::map<std::string, int> counts;
  for (const auto& n : ops.nodes) ++counts[n.op];
  std::string input = "no runtime input";
  if (!ops.inputs.empty()) {
    const ValueInfo& in = ops.inputs[0];
    std::string dims;
    for (std::size_t i = 0; i < in.shape.size(); ++i) dims += str(i ? "," : "", in.shape[i] < 0 ? std::string("?") : std::to_string(in.shape[i]));
    input = str("input '", in.name, "' [", dims, "] ", dtype_name(in.dtype));
    if (ops.inputs.size() > 1) input += str(" and ", ops.inputs.size() - 1, " more");
  }
  std::printf("model  %s: opset %lld, %zu nodes, %s\n", o.model.c_str(), static_cast<long long>(ops.opset),
              ops.nodes.size(), input.c_str());
  std::string list;
  for (const auto& [op, k] : counts) list += str(list.empty() ? "" : ", ", op, " ", k);
  std::printf("ops    %s\n", list.c_str());

  // Ops no engine knows stop the check where the loader would stop a job.
  const auto& sup = supported_ops();
  const std::set<std::string> known(sup.begin(), sup.end());
  std::map<std::string, std::vector<std::string>> unknown;
  for (const auto& n : ops.nodes) {
    const bool ok = n.op.find("::") == std::string::npos &&
                    (is_fold_only_op(n.op) || is_convertible_op(n.op) || (known.count(n.op) && !is_sluice_op(n.op)));
    if (!ok) unknown[n.op].push_back(n.name);
  }
  std::vector<std::pair<std::string, Verdict>> verdicts;
  std::string batch_line;  // a model with a fixed batch: whether a job at another batch re-specializes it
  if (!unknown.empty()) {
    const std::string why = str("refused: unsupported ", ops_with_nodes(unknown), " (opset ", ops.opset, ")");
    verdicts = {{"cpu", {false, why}}, {"cuda", {false, cuda_built() ? why : "not built into this sluice (SLUICE_CUDA=OFF)"}}};
  } else {
    std::string why;
    Graph g;
    try {
      // A text model: every input one of the token inputs the text input fills (model/prepare.h).
      bool text = !ops.inputs.empty();
      for (const ValueInfo& v : ops.inputs)
        text = text && std::find(std::begin(kTokenPlanes), std::end(kTokenPlanes), v.name) != std::end(kTokenPlanes);
      if (ops.inputs.size() != 1 && !text)
        throw InputError(str("the model has ", ops.inputs.size(), " runtime inputs; Sluice feeds exactly one (or the token "
                             "inputs of a text model: input_ids, attention_mask, token_type_ids, position_ids)"));
      const ValueInfo& in = ops.inputs[0];
      PrepareOptions po;
      if (text) {
        // Checked at the model's own length, or 128 tokens when it is dynamic.
        po.tokens.enabled = true;
        po.tokens.length = in.shape.size() == 2 && in.shape[1] > 0 ? 0 : 128;
        po.batch_size = in.shape.size() == 2 && in.shape[0] > 0 ? in.shape[0] : 1;
        g = prepare_graph(load_onnx(o.model), po);
        std::printf("text   token inputs bound by name; checked at %lld tokens a passage\n",
                    static_cast<long long>(g.inputs.at(0).shape.at(2)));
      } else {
        po.batch_size = !in.shape.empty() && in.shape[0] > 0 ? in.shape[0] : 1;
        po.sample_shape = o.sample_shape;
        if (po.sample_shape.empty()) {
          for (std::size_t i = 1; i < in.shape.size(); ++i) {
            if (in.shape[i] < 1)
              throw UsageError(str("the model's input has a dynamic dimension ", i, "; give --sample-shape"));
            po.sample_shape.push_back(in.shape[i]);
          }
        }
        po.input_dtype = in.dtype == DType::U8 ? DType::U8 : DType::F32;
        Graph model = load_onnx(o.model);
        g = prepare_graph(model, po);
        if (!in.shape.empty() && in.shape[0] > 0) batch_line = static_batch_line(std::move(model), po);
      }
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      why = str("refused: ", e.what());
    }
    for (const std::string engine : {"cpu", "cuda"}) {
      if (engine == "cuda" && !cuda_built()) {
        verdicts.push_back({engine, {false, "not built into this sluice (SLUICE_CUDA=OFF)"}});
        continue;
      }
      if (!why.empty()) {
        verdicts.push_back({engine, {false, why}});
        continue;
      }
      verdicts.push_back({engine, engine_verdict(engine, g, ops.opset, engine == "cpu" || gpu_count() > 0)});
    }
  }
  bool runs = false;
  for (const auto& [engine, v] : verdicts) {
    std::printf("%-6s %s\n", engine.c_str(), v.text.c_str());
    if (v.runs && (o.device == "any" || o.device == engine)) runs = true;
  }
  if (!batch_line.empty()) std::printf("batch  %s\n", batch_line.c_str());
  std::fflush(stdout);
  return runs ? kExitOk : kExitBadInput;
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* sub = app.add_subcommand("check", "Say whether a model runs on each engine, which ops it uses, and for "
                                              "a refused model the missing ops and nodes (exit 0: it runs, 3: refused)");
  sub->add_option("--model", opts->model, "ONNX model file")->required();
  sub->add_option("--sample-shape", opts->sample_shape, "shape of one sample, when the model's input leaves it dynamic")
      ->delimiter(',');
  sub->add_option("--device", opts->device, "the engine that must run it for exit 0: any, cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"any", "cpu", "cuda"}));
  sub->callback([opts] {
    const int status = check_command(*opts);
    if (status != kExitOk) throw CLI::RuntimeError(status);
  });
}

}  // namespace sluice
