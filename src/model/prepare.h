#pragma once
// From a loaded ONNX graph to the graph an engine runs: the job's batch size and input shape are
// fixed, preprocessing is put in front, output heads behind, and the passes run.
#include <string>
#include <vector>

#include "model/batch_adapt.h"
#include "model/graph.h"

namespace sluice {

// What the job stores from the model's first output ("logits" [B, C, ...]).  Heads work on axis 1
// (the classes):
//   Logits     the model's output as is (cast to dtype)
//   ArgMax     the class index of the largest logit
//   Softmax    probabilities: exp(x_c) / sum over c of exp(x_c)
//   TopK       the k largest logits and their class indices, largest first ("<name>_values" are
//              logits, not probabilities; "<name>_indices" int32)
//   TopKProbs  Softmax then TopK: the k largest probabilities and their class indices
//   Embedding  the vector per sample: [B, D] as is ([B, D, 1, 1] flattened), [B, T, D] its first
//              token, or for a text model (PrepareOptions::tokens) its tokens pooled over the
//              attention mask as `pooling` says; L2-normalised unless
//              `normalize` is off (y / max(|y|, 1e-12), as torch.nn.functional.normalize)
//   Detections sluice.Detections over the model's detection outputs (format `detection.format`):
//              "<name>" float32 [B, K, 6] (x1, y1, x2, y2 in input pixels, score, class; by score,
//              unused rows zero) and "<name>_count" int32 [B]
struct DetectionOptions {
  std::string format = "auto";   // detr | rtdetr | yolo | yolov5 | yolov10 | auto (detr or yolo, from the outputs' shapes)
  float score_threshold = 0.25f; // a detection's score must exceed it
  float iou_threshold = 0.45f;   // yolo: class-aware NMS drops boxes overlapping a kept one by more
  int max_detections = 100;      // K
};

struct OutputSpec {
  enum class Kind { Logits, ArgMax, Softmax, TopK, TopKProbs, Embedding, Detections };
  std::string name;          // dataset name under /outputs: "logits", "argmax", "softmax", "<name>_values", "<name>_indices"
  Kind kind = Kind::Logits;
  DType dtype = DType::F32;  // Logits/Softmax: F32, F16 or BF16; ArgMax: U8 or I32, or Undefined to
                             // let prepare_graph choose U8 when the class axis has <= 256 entries, else I32
  int top_k = 0;             // TopK and TopKProbs
  bool normalize = true;     // Embedding: L2-normalise
  // Embedding of a text model's tokens [B, L, D], the sentence-transformers Pooling modes: "cls"
  // (the first token), "max" (over the unmasked tokens), "mean" (masked mean), "mean_sqrt_len_tokens"
  // (the masked sum over sqrt of the count), "weightedmean" (token i weighted i + 1), "lasttoken" (the
  // last unmasked token).  Several are concatenated along D in that order, as sentence-transformers
  // does.  Empty: the first token (as for image transformers).
  std::vector<std::string> pooling;
  DetectionOptions detection;  // Detections
};

// A text model's token inputs (input_ids, attention_mask, token_type_ids, position_ids: [B, L]
// integers): the slots hold them as one int64 tensor [B, planes, L], one plane per input, and each
// model input is bound by its name to its plane (kTokenPlanes).  An attention_mask plane is also
// fed when pooling needs it and the model does not read it.
inline constexpr const char* kTokenPlanes[] = {"input_ids", "attention_mask", "token_type_ids", "position_ids"};
struct TokenInputs {
  bool enabled = false;
  int64_t length = 0;  // L: 0 takes the model's own (fixed at export); a dynamic length needs it
};

struct PrepareOptions {
  int64_t batch_size = 1;
  Shape sample_shape;                 // one sample, without the batch dimension
  DType input_dtype = DType::F32;     // what the slots hold: F32 or U8
  // Preprocessing on the device: y = (x * scale - mean[c]) / std[c].  Added when `normalize` is set
  // or the input is uint8 (then at least the cast to float happens on the device).
  bool normalize = false;
  float scale = 1.f;
  std::vector<float> mean, stddev;
  std::vector<OutputSpec> outputs;    // heads on the model's first output (or model_output)
  std::string model_output;           // the graph output the heads read ("": the first)
  TokenInputs tokens;                 // a text model: sample_shape and input_dtype are then ignored
  bool fuse = true;                   // BatchNorm folding and Conv(+Add)(+act) fusion
  // A model whose input fixes another batch than batch_size (model/batch_adapt.h).
  StaticBatch static_batch = StaticBatch::Auto;
};

// Returns a graph with a single input named "input" [B, sample_shape...] of `input_dtype` (a text
// model: int64 [B, planes, L], Graph::input_planes naming the planes) and one
// graph output per OutputSpec, named as the spec.  Runs: input shape fixing, constant folding
// (including the exporters' Shape/Gather/... subgraphs), Identity removal, BatchNorm folding,
// Conv fusion, dead-node elimination, batch adaptation of a static-batch model (re-specialization or
// sub-batches, model/batch_adapt.h) and shape inference: the passes of model/passes.h.  Throws
// InputError when the model does not fit the job (e.g. the input shape does not match, an op is
// unsupported).
Graph prepare_graph(Graph model, const PrepareOptions& options);

// The datasets under /outputs that the head of `spec` stores, the graph outputs prepare_graph names
// for it: "<name>"; TopK and TopKProbs "<name>_values" and "<name>_indices"; Detections "<name>"
// and "<name>_count".
std::vector<std::string> head_datasets(const OutputSpec& spec);

// The ops the engines implement (default domain, plus the sluice domain ones of graph.h).
const std::vector<std::string>& supported_ops();

}  // namespace sluice
