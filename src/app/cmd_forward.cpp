#include "app/cmd_forward.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/job_plan.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "io/npy.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#ifdef SLUICE_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace sluice {

std::string output_file_name(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  if (s.empty() || s == "." || s == "..") s = "_" + s;  // never a name that means a folder
  return s + ".npy";
}

namespace {

// One forward pass; returns the outputs in host memory.
std::vector<Tensor> run_once(Engine& e, const std::string& device, const Tensor& input) {
#ifdef SLUICE_HAVE_CUDA
  if (device == "cuda") return cuda::run_forward(e, input, 0);
#endif
  (void)device;
  std::memcpy(e.input_buffer(0), input.bytes.data(), input.nbytes());
  e.forward(0, nullptr);
  std::vector<Tensor> outs;
  for (std::size_t k = 0; k < e.outputs().size(); ++k) {
    const ValueInfo& o = e.outputs()[k];
    outs.emplace_back(o.dtype, o.shape);
    if (outs.back().nbytes()) std::memcpy(outs.back().bytes.data(), e.output_buffer(0, static_cast<int>(k)), outs.back().nbytes());
  }
  return outs;
}

}  // namespace

void forward_command(const ForwardOptions& o) {
  const Precision precision = precision_from_name(o.precision);
  if (o.device != "cpu" && o.device != "cuda") throw UsageError(str("--device must be cpu or cuda, not '", o.device, "'"));
  const std::string backend = choose_backend(o.device);  // a clear error where this build or machine has no GPU
  if (o.threads < 0) throw UsageError(str("--threads must be 0 (all cores) or more, not ", o.threads));

  NpyArray x = read_npy(o.input);
  if (x.dtype != DType::F32 && x.dtype != DType::U8)
    throw InputError(str(o.input, ": the input must be float32 or uint8, not ", dtype_name(x.dtype)));
  if (x.shape.size() < 2) throw InputError(str(o.input, ": the input needs a batch axis and a sample shape, got ", shape_str(x.shape)));

  PrepareOptions po;
  po.batch_size = x.shape[0];
  po.sample_shape.assign(x.shape.begin() + 1, x.shape.end());
  po.input_dtype = x.dtype;
  po.fuse = !o.no_fuse;
  po.static_batch = static_batch_from_name(o.static_batch);
  const Graph graph = prepare_graph(load_onnx(o.model), po);

  EngineOptions eo;
  eo.precision = precision;
  eo.threads = o.threads;
  eo.io_sets = 1;
  eo.cuda_graphs = false;  // one pass: capturing would only cost time
  if (o.device == "cpu" && precision != Precision::FP32)
    log_warn("the cpu engine computes in float32; --precision ", o.precision, " applies to --device cuda only");
  std::unique_ptr<Engine> engine = create_engine(backend, graph, eo);
  log_info("forward: ", engine->describe());

  Tensor input(x.dtype, x.shape);
  std::memcpy(input.bytes.data(), x.data.data(), input.nbytes());
  const std::vector<Tensor> outs = run_once(*engine, backend, input);

  std::error_code ec;
  std::filesystem::create_directories(o.outdir, ec);
  if (ec || !std::filesystem::is_directory(o.outdir))
    throw InputError(str(o.outdir, ": cannot create the output folder", ec ? ": " + ec.message() : std::string()));
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const ValueInfo& info = engine->outputs()[k];
    const std::string path = (std::filesystem::path(o.outdir) / output_file_name(info.name)).string();
    write_npy(path, outs[k].dtype, outs[k].shape, outs[k].bytes.data());
    std::printf("%s %s %s\n", info.name.c_str(), dtype_name(info.dtype), shape_str(info.shape).c_str());
  }
  std::fflush(stdout);
}

void add_forward_command(CLI::App& app) {
  auto opts = std::make_shared<ForwardOptions>();
  CLI::App* sub = app.add_subcommand("forward", "Run one forward pass of a model on a .npy batch and write each output as .npy");
  sub->add_option("--model", opts->model, "ONNX model file")->required();
  sub->add_option("--input", opts->input, ".npy batch [B, ...], float32 or uint8")->required();
  sub->add_option("--outdir", opts->outdir, "folder for <output>.npy files")->required();
  sub->add_option("--device", opts->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--precision", opts->precision, "fp32, tf32, fp16 or bf16 (cuda)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  sub->add_flag("--no-fuse", opts->no_fuse, "skip BatchNorm folding and Conv fusion");
  sub->add_option("--static-batch", opts->static_batch,
                  "a model whose batch is fixed: auto (re-specialize when proven, else sub-batches), respecialize "
                  "(or fail), sub-batch")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "respecialize", "sub-batch"}));
  sub->add_option("--threads", opts->threads, "cpu engine threads (0: all cores)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->callback([opts] { forward_command(*opts); });
}

}  // namespace sluice
