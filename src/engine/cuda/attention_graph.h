#pragma once
// sluice.Attention as cuDNN's fused scaled-dot-product attention (the graph API's SDPA node through
// the header-only cudnn-frontend): o = softmax(scale * q k^T + bias) v in one flash-attention
// kernel, for fp16/bf16 with head sizes that are multiples of 8 up to 128.  Built only when CMake
// found the frontend's headers (SLUICE_HAVE_CUDNN_FRONTEND); create() says why not otherwise.
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace sluice::cuda {

// The tensors are [b, h, rows, cols]: q [b, h, s, d], k [b, h, s_kv, d], v [b, h, s_kv, dv],
// o [b, h, s, dv], bias [1, h, s, s_kv] (broadcast over b, packed), or [b, 1, s, s_kv] (broadcast over
// h: bias_per_sample, a text encoder's padding mask).  q, k, v and o are packed unless
// `strides` gives them (b, h, row) strides in elements, columns contiguous (the views of layout
// "strided"; the pointers passed to run() then point at each view's first element).
struct AttentionGraphSpec {
  DType t = DType::BF16;
  int64_t b = 1, h = 1, s = 0, s_kv = 0, d = 0, dv = 0;
  float scale = 1.f;
  bool bias = false;
  bool bias_per_sample = false;
  bool strided = false;
  int64_t strides[4][3] = {};   // q, k, v, o: b, h, row
};

// Whether cuDNN's fused attention takes the shape at all (type, head sizes, strides that keep rows
// 16-byte aligned); the final word is create()'s.  `offsets` (q, k, v, o, in elements) are where
// strided views start.
bool attention_graph_fits(const AttentionGraphSpec& s, const int64_t* offsets = nullptr);

class AttentionGraph {
 public:
  virtual ~AttentionGraph() = default;
  // nullptr with the reason in *why when cuDNN has no engine for it; never throws for that.
  static std::unique_ptr<AttentionGraph> create(cudnnHandle_t h, const AttentionGraphSpec& s, std::string* why);
  virtual std::size_t workspace_bytes() const = 0;
  // Runs on the stream h is bound to; false when cuDNN refuses (never throws).
  virtual bool run(cudnnHandle_t h, const void* q, const void* k, const void* v, const void* bias, void* o,
                   void* workspace) = 0;
};

}  // namespace sluice::cuda
