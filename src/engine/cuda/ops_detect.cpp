// sluice.Detections: the decode and selection kernels of kernels_detect.cu; only [B, K, 6] boxes
// and [B] counts leave the GPU.  The rows are float32 at every precision: the kernels decode in
// float and write the rows straight into the graph output, so the stored boxes and scores are the
// float decode of the raw outputs as the engine computed them (at bf16 a 640 px box rounded to
// the compute type would move by up to 2 px, a score by 2e-3).
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_detect.h"
#include "model/detections.h"

namespace sluice::cuda {

void lower_detections(Builder& b, const Node& n) {
  std::vector<int> in;
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    in.push_back(b.input(n, i));
    if (b.slot(in.back()).dtype != b.compute)
      b.fail(n, "input '", b.slot(in.back()).name, "' is ", dtype_name(b.slot(in.back()).dtype), "; detections read float tensors");
    shapes.push_back(b.slot(in.back()).shape);
  }
  const DetectionLayout l = detection_layout(n.get_string("format", "auto"), shapes);
  DetectArgs a;
  a.kind = static_cast<int>(l.kind);
  a.batch = l.batch;
  a.candidates = l.candidates;
  a.classes = l.classes;
  a.k = n.get_int("max_detections", 100);
  a.score_threshold = n.get_float("score_threshold", 0.25f);
  a.iou_threshold = n.get_float("iou_threshold", 0.45f);
  a.width = static_cast<float>(n.get_int("width", 1));
  a.height = static_cast<float>(n.get_int("height", 1));
  // The detections' own graph output slot (float32): no pass through the compute type.
  int dets = b.has_output(n, 0) ? b.graph_output(n.outputs[0]) : -1;
  int stored_dets = -1;  // a detections tensor that is no graph output (a graph built by hand): cast after
  if (dets < 0) {
    stored_dets = b.output(n, 0);
    dets = b.slot(stored_dets).dtype == DType::F32 ? stored_dets : b.temp(DType::F32, b.slot(stored_dets).shape, n.name + " (float)");
  }
  if (b.slot(dets).dtype != DType::F32 || b.slot(dets).shape != Shape{l.batch, a.k, 6})
    b.fail(n, "the detections output must be float [B, K, 6], not ", dtype_name(b.slot(dets).dtype), " ",
           shape_str(b.slot(dets).shape));
  const int count = b.output(n, 1);
  if (b.slot(count).dtype != DType::I32) b.fail(n, "the count output must be int32");
  const int cand = b.temp(DType::F32, {l.batch, l.candidates, 6}, n.name + " (candidates)");
  const DType t = b.compute;
  const int x0 = in[0], x1 = in.size() > 1 ? in[1] : in[0];
  b.add(n.name, {x0, x1, cand, dets, count}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    detections(t, a, bd.at(x0), bd.at(x1), bd.at<float>(cand), bd.at<float>(dets), bd.at<int32_t>(count), s);
  });
  if (stored_dets >= 0 && stored_dets != dets) {
    const DType to = b.slot(stored_dets).dtype;
    const int64_t numel = b.slot(dets).numel();
    b.add(n.name + " (to " + dtype_name(to) + ")", {dets, stored_dets}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      cast(DType::F32, to, bd.at(dets), bd.at(stored_dets), numel, s);
    }, "Convert");
  }
}

}  // namespace sluice::cuda
