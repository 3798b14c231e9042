#pragma once
// The engine's own CUDA kernels, as plain host functions that enqueue on a stream.  Everything the
// kernels need is passed by value in small parameter structs (no device allocations, no host
// synchronization), so a captured CUDA graph replays them with the pointers baked in.
//
// Float kernels run on float, __half and __nv_bfloat16 storage and compute in float.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace sluice::cuda {

constexpr int kMaxRank = 8;

// The vectorized kernels and the engine's own depthwise convolution are used unless
// SLUICE_CUDA_FAST=0 (for comparing with the plain kernels and cuDNN).
bool fast_kernels();

// An engine switch in the environment, read where it is called (a test may set it around one
// engine): unset, empty or "1" is on, "0" off; any other value is a usage error that names it.
bool switch_on(const char* name);

enum class Act : int {
  Identity = 0, Relu, LeakyRelu, Clip, Sigmoid, Tanh, HardSigmoid, HardSwish, Exp, Log, Sqrt, Neg,
  Abs, Erf, Reciprocal, Floor, Ceil, Round, Elu, Softplus, Gelu, GeluTanh, Selu, Sin, Cos, Not, Sign,
  Swish   // x * sigmoid(a * x): SiLU (a = 1), CLIP's quick GELU (a = 1.702)
};
// Activation parameters: LeakyRelu/Elu alpha in a; Clip min/max in a/b; HardSigmoid alpha/beta;
// Selu alpha/gamma; Swish alpha in a.
struct ActParams {
  Act act = Act::Identity;
  float a = 0.f, b = 0.f;
};

enum class BinOp : int { Add = 0, Sub, Mul, Div, Pow, Max, Min, PRelu, Mod };
enum class RedOp : int { Sum = 0, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSumExp };

// y = f(x) elementwise, n elements of float type t.
void unary(DType t, const void* x, void* y, int64_t n, ActParams p, cudaStream_t s);

// The Swish step (ops_elementwise.cpp): y = v * sigmoid(alpha * v) with v = x + bias[i % channels]
// (bias: `channels` floats; null for v = x), n elements of float type t, in fp32, rounded once.  Its
// own kernel, branch-free, two 16-byte packs a thread at a time.  Exact math is v / (1 + expf(-alpha
// * v)), the generic unary kernel's Act::Swish bit for bit; fast math takes exp2 and the reciprocal
// from the hardware's approximations (a few fp32 ulps, far below one rounding of a 16-bit type).
struct SwishParams {
  float alpha = 1.f;
  const float* bias = nullptr;
  int64_t channels = 1;
  bool fast = false;
};
void swish(DType t, const void* x, void* y, int64_t n, const SwishParams& p, cudaStream_t s);

// y = a op b with NumPy broadcasting.  Shapes are already collapsed and padded to `rank` dims; a
// stride of 0 marks a broadcast dimension.
struct BroadcastShape {
  int rank = 0;
  int64_t out[kMaxRank] = {};
  int64_t sa[kMaxRank] = {};
  int64_t sb[kMaxRank] = {};
};
void binary(DType t, BinOp op, const void* a, const void* b, void* y, const BroadcastShape& shape,
            ActParams post, cudaStream_t s);

// The convolution epilogue: y = act(y + bias[c] + z) over [outer, channels, inner]; bias and z may
// be null.
void bias_act(DType t, void* y, const void* bias, const void* z, int64_t outer, int64_t channels,
              int64_t inner, ActParams p, cudaStream_t s);

// y = x * scale[c] + shift[c] (float scale/shift): unfused BatchNormalization.
void channel_affine(DType t, const void* x, void* y, const float* scale, const float* shift,
                    int64_t outer, int64_t channels, int64_t inner, cudaStream_t s);

// Any-to-any element type conversion (float types round to nearest even; to integers truncates
// like a C cast; to bool: x != 0).
void cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t s);

// y = (float(x) * scale - mean[c]) / std[c], x uint8 or float type [n, channels, inner], y float
// type.  mean/std are device arrays of `channels` floats, or of 1 float when per_channel is false;
// null means 0 and 1 (a plain conversion).  With nhwc, y is [n, inner, channels_out] (channels-last,
// channels past `channels` zero: the padded stem of a convolution).
struct NormalizeShape {
  int64_t n = 0, channels = 0, inner = 1;
  int64_t channels_out = 0;   // nhwc only; >= channels
  bool nhwc = false;
  float scale = 1.f;
  bool per_channel = false;
};
void normalize(DType in, DType out, const void* x, void* y, const NormalizeShape& shape, const float* mean,
               const float* stddev, cudaStream_t s);

// y[i] = x[sum_d (i_d % in_dim[d]) * in_stride[d]] for each output multi-index i: Transpose,
// Slice (x already offset, strides scaled by steps, possibly negative), Expand, Tile.
struct CopyShape {
  int rank = 0;
  int64_t out[kMaxRank] = {};
  int64_t in_dim[kMaxRank] = {};
  int64_t in_stride[kMaxRank] = {};
};
void strided_copy(std::size_t elem_size, const void* x, void* y, const CopyShape& shape, cudaStream_t s);
// Whether `shape` is the patch embeddings' permutation x [N, C, Hp, p, Wp, q] -> [N, Hp, Wp, C, p, q]
// (contiguous input, no broadcast), which strided_copy moves through shared memory where the patch
// fits (SLUICE_CUDA_PATCHIFY=0: the general kernel).
bool is_patch_permutation(const CopyShape& shape);

// Several 2-D copies (height rows of width bytes, with their own pitches) in one launch of 16-byte
// accesses: Concat, Split and Gather pieces.  Returns false, copying nothing, when a size, pitch or
// address is not a multiple of 16 bytes or there are more than kMaxCopyBlocks blocks.
constexpr int kMaxCopyBlocks = 16;
struct CopyBlock {
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t src_pitch = 0, dst_pitch = 0, width = 0, height = 0;
};
bool copy_blocks16(const CopyBlock* blocks, int count, cudaStream_t s);

// y[b][c][r] = x[b][r][c] for `batch` planes of rows x cols: NCHW <-> NHWC (batch = N, and rows,
// cols = C, H*W one way, H*W, C the other).  batch <= 65535.
void transpose_last2(std::size_t elem_size, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols,
                     cudaStream_t s);

// Atrous convolution by space-to-batch: a stride-1 convolution with dilation d and "same" padding
// equals an undilated one over the d*d interleaved sub-images x_rs[u, v] = x[r + d*u, s + d*v],
// stacked along the batch.  Space: [n, c, h, w]; batched: [d*d*n, c, ceil(h/d), ceil(w/d)] with
// sub-image (r, s) of sample i at batch (r*d + s)*n + i; both NCHW, or both channels-last.
struct AtrousShape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t d = 1;
  bool nhwc = false;
};
// Space to batch; positions past h or w read as zeros.
void space_to_batch(std::size_t elem_size, const void* x, void* xb, const AtrousShape& shape, cudaStream_t s);
// Batch to space; the padded positions are dropped.
void batch_to_space(std::size_t elem_size, const void* yb, void* y, const AtrousShape& shape, cudaStream_t s);

// Space to depth with zero padding, in one pass: x [n, c, h, w] (NCHW) padded by pad_top rows and
// pad_left columns (and zeros past h and w), cut into s x s blocks; output channel (ci * s + i) * s + j
// of block (u, v) is x[ci][u * s + i - pad_top][v * s + j - pad_left], the order of the strided stem's
// Reshape [n, c, oh, s, ow, s] + Transpose (0, 1, 3, 5, 2, 4) + Reshape [n, c * s * s, oh, ow]
// (model/fuse_patches.cpp).  y is [n, oh, ow, c * s * s] when nhwc, else [n, c * s * s, oh, ow].
struct SpaceToDepthShape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t s = 1, pad_top = 0, pad_left = 0, oh = 0, ow = 0;
  int64_t c_out = 0;   // channels written (0: c s s); those past c s s are zeros
  bool nhwc = false;
};
void space_to_depth(std::size_t elem_size, const void* x, void* y, const SpaceToDepthShape& shape, cudaStream_t s);

enum class PadMode : int { Constant = 0, Reflect, Edge, Wrap };
struct PadShape {
  int rank = 0;
  int64_t in[kMaxRank] = {};
  int64_t out[kMaxRank] = {};
  int64_t begin[kMaxRank] = {};   // may be negative (cropping)
  PadMode mode = PadMode::Constant;
  uint64_t value_bits = 0;        // the constant, already in the element type's bits
};
void pad(std::size_t elem_size, const void* x, void* y, const PadShape& shape, cudaStream_t s);

// ONNX Resize on up to kMaxRank dims; at most 3 dims may interpolate (linear) or 4^2 (cubic, two dims).
enum class ResizeMode : int { Nearest = 0, Linear, Cubic };
enum class CoordMode : int { HalfPixel = 0, PytorchHalfPixel, AlignCorners, Asymmetric,
                             TfHalfPixelForNearest, HalfPixelSymmetric };
// Simple: Resize-10 and Upsample (ceil when downsampling, truncate otherwise).
enum class NearestMode : int { RoundPreferFloor = 0, RoundPreferCeil, Floor, Ceil, Simple };
struct ResizeShape {
  int rank = 0;
  int64_t in[kMaxRank] = {};
  int64_t out[kMaxRank] = {};
  float scale[kMaxRank] = {};     // output/input, as ONNX uses it in the coordinate formulas
  ResizeMode mode = ResizeMode::Nearest;
  CoordMode coord = CoordMode::HalfPixel;
  NearestMode nearest = NearestMode::RoundPreferFloor;
  float cubic_a = -0.75f;
  bool exclude_outside = false;
};
void resize(DType t, const void* x, void* y, const ResizeShape& shape, cudaStream_t s);

// The fused output tail: a 2-D linear or nearest Resize of x (logical [N, C, H, W] in `s`, stored
// NCHW or channels-last) evaluated per output pixel, writing straight into the graph outputs that
// are not null: logits [N, C, OH, OW] (NCHW) in logits_type, argmax [N, OH, OW] over C, softmax
// over C [N, C, OH, OW], top-k over C (largest first, ties to the lower index) values and indices
// [N, k, OH, OW].  Index outputs are U8, I32 or I64; float outputs F32, F16 or BF16.
struct TailOutputs {
  void* logits = nullptr;
  DType logits_type = DType::F32;
  void* argmax = nullptr;
  DType argmax_type = DType::I64;
  bool argmax_select_last = false;
  void* softmax = nullptr;
  DType softmax_type = DType::F32;
  void* topk_values = nullptr;
  DType values_type = DType::F32;
  void* topk_indices = nullptr;
  DType indices_type = DType::I64;
  int64_t k = 0;
};
void resize_tail(DType t, const void* x, const ResizeShape& s, bool nhwc, const TailOutputs& o, cudaStream_t st);

// Depthwise 2-D convolution (one filter per channel) of channels-last tensors: x [n, h, w, c],
// w [kh, kw, c], y and z [n, oh, ow, c]; y = act(conv + bias[c] + z), bias and z may be null.
// ph, pw are the begin paddings (the end ones follow from the output size).
struct DepthwiseShape {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};
void depthwise_conv(DType t, const void* x, const void* w, const void* bias, const void* z, void* y,
                    const DepthwiseShape& s, ActParams act, cudaStream_t st);

// Max/average pooling over 1 to 3 spatial dims of [N, C, spatial...].
struct PoolShape {
  int dims = 2;
  int64_t n = 0, c = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};   // begin and end padding of each dim
  bool is_max = true;
  bool count_include_pad = false;
  bool channels_last = false;   // x and y are [N, spatial..., C] in memory
};
void pool(DType t, const void* x, void* y, const PoolShape& shape, cudaStream_t s);

// Reductions over the middle axis of [outer, r, inner].
void reduce(DType t, RedOp op, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, cudaStream_t s);

// Softmax / LogSoftmax over the middle axis of [outer, r, inner].
void softmax(DType t, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, bool log, cudaStream_t s);

// sluice.Attention's softmax on the GEMM path (kernels_attention.cu): rows of `skv` scores of type t
// (rows = matrices * s), plus row i (row 0 when bias_rows is 1) of bias matrix ((m / group) mod period)
// of [period, bias_rows, skv] in bias_type
// when bias is not null, softmax with fp32 statistics, written as t (probs may be scores: each row
// is read before it is written).  A row that is all -inf gives zeros with zero_rows, else NaN (as
// Softmax does).
void attention_softmax(DType t, DType bias_type, const void* scores, const void* bias, void* probs, int64_t rows,
                       int64_t s, int64_t skv, int64_t period, int64_t group, int64_t bias_rows, bool zero_rows,
                       cudaStream_t st);

// sluice.Attention in one kernel for short sequences (kernels_attention.cu, "Attn window"):
// softmax(scale * q k^T + bias) v per score matrix m = n * heads + h, q k^T and p v on tensor cores
// with fp32 accumulation, the softmax in fp32, p rounded to t.  Operand i (q, k, v, y) of matrix m
// starts at ptr + n * sample[i] + h * head[i] (ptr at the view's first element) with rows row[i]
// apart, columns contiguous; kt: k given as [d, skv] (its columns row[1] apart).  bias: [period, s,
// skv] (matrix m adds (m / group) mod period) in F32 or t, or null.  A row whose keys are all -inf gives
// zeros with zero_rows, else NaN.  fp16/bf16, s and skv up to kWindowMaxTokens, d and dv up to 128.
constexpr int64_t kWindowMaxTokens = 128;
struct WindowAttentionArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *bias = nullptr;
  void* y = nullptr;
  int64_t mats = 0, heads = 1, s = 0, skv = 0, d = 0, dv = 0, period = 0;
  int64_t group = 1;       // matrix m adds bias matrix (m / group) mod period
  int64_t bias_rows = 0;   // rows of a bias matrix: s (0 says s too), or 1 for every query row
  int64_t sample[4] = {}, head[4] = {}, row[4] = {};
  bool kt = false, zero_rows = false;
  bool vec[4] = {};   // set by window_attention
  float scale = 1.f;
};
bool window_attention_fits(DType t, int64_t s, int64_t skv, int64_t d, int64_t dv);
void window_attention(DType t, DType bias_type, const WindowAttentionArgs& args, cudaStream_t st);

// ArgMax / ArgMin over the middle axis of [outer, r, inner]; index type I64, I32 or U8.
void argmax(DType t, DType index_type, const void* x, void* y, int64_t outer, int64_t r, int64_t inner,
            bool is_min, bool select_last, cudaStream_t s);

// TopK over the middle axis of [outer, r, inner]: values [outer, k, inner] and int64 indices;
// sorted, ties broken by the lower index.
void topk(DType t, const void* x, void* values, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
          int64_t k, bool largest, cudaStream_t s);


// One antialiased Resize pass along the middle axis of [outer, in_len, inner] -> [outer, out_len,
// inner]: output o is the sum over its `width` taps of weight * input at index (both [out_len,
// width], engine/resize_taps.h); tin and tout float types (float accumulation).
void resize_taps(DType tin, DType tout, const void* x, void* y, const int64_t* index, const float* weight, int64_t outer,
                 int64_t in_len, int64_t out_len, int64_t inner, int64_t width, cudaStream_t s);

// ---- the residual stream (kernels_residual.cu) ------------------------------------------------------
// Each operand names its own element type (F32, F16 or BF16), so fp32 residual sums and compute-type
// branches mix freely.

// A float operand of a residual step: `count` elements repeated over the output (a broadcast over
// leading axes only: a position embedding [1, N, C] added to [B, N, C]).
struct ResidualOperand {
  const void* p = nullptr;
  DType t = DType::F32;
  int64_t count = 0;
};

// y = a + b (a * b with multiply), each operand repeating onto the n elements of y, in float.
// `vectorized` false keeps the one-element kernel (SLUICE_CUDA_NORM_VEC=0, for comparison).
void residual_add(const ResidualOperand& a, const ResidualOperand& b, void* y, DType ty, int64_t n, cudaStream_t s,
                  bool multiply = false, bool vectorized = true);

// LayerNormalization over rows of `cols` elements of x = a (+ b when b.p is set), statistics in
// float: sum (when non-null, of type tsum) receives x, y = (x - mean) * inv * gamma + beta (type ty),
// mean and inv (when non-null, type tstat) the row's mean and 1 / sqrt(var + eps).
struct ResidualNorm {
  ResidualOperand a, b;
  void* sum = nullptr;
  DType tsum = DType::F32;
  void* y = nullptr;
  DType ty = DType::F32;
  void* mean = nullptr;
  void* inv = nullptr;
  DType tstat = DType::F32;
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
  const float* gamma = nullptr;   // [cols] or null
  const float* beta = nullptr;    // [cols] or null
  bool vectorized = true;         // false: the warp-per-row kernel of scalar loads (SLUICE_CUDA_NORM_VEC=0)
};
void residual_norm(const ResidualNorm& r, cudaStream_t s);

// ---- comparisons, logic, selection, indexing and scans (kernels_index.cu) ------------------------
// Element types these kernels read: the float types, I32, I64, U8, I8 and Bool (one byte, 0 or 1).

// Up to three operands broadcast onto one output: right-aligned dims of `rank`, a stride of 0 marks
// a broadcast dimension (strides in elements).
struct Broadcast3 {
  int rank = 0;
  int64_t out[kMaxRank] = {};
  int64_t st[3][kMaxRank] = {};
};

enum class CmpOp : int { Equal = 0, Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Xor };
// y = a op b as bool bytes, a and b of type t (operands 0 and 1 of `shape`).  Float comparisons
// are IEEE ones (NaN compares unequal and unordered); And/Or/Xor read nonzero as true.
void compare(DType t, CmpOp op, const void* a, const void* b, uint8_t* y, const Broadcast3& shape, cudaStream_t s);

// y = a op b on I64 or I32 tensors (integer arithmetic left at run time: index computations).
// Div truncates toward zero; Mod takes the divisor's sign (fmod 0) or the dividend's (fmod 1); a
// zero divisor gives 0 (the kernel cannot raise, and ONNX leaves it undefined).
void int_binary(DType t, BinOp op, bool fmod, const void* a, const void* b, void* y, const Broadcast3& shape, cudaStream_t s);

enum class TestOp : int { IsNaN = 0, IsInf, Not };
// y = test(x) as bool bytes: IsNaN and IsInf (+inf when `pos`, -inf when `neg`) of a float type t,
// Not of bools.
void test_values(DType t, TestOp op, const void* x, uint8_t* y, int64_t n, bool pos, bool neg, cudaStream_t s);

// Where: out = cond ? x : y, cond bool (operand 0), x and y (operands 1 and 2) of elem_size bytes.
void where(std::size_t elem_size, const uint8_t* cond, const void* x, const void* y, void* out, const Broadcast3& shape,
           cudaStream_t s);

// Gather with indices read on the device: y[o, j, i] = x[o, idx[j], i] over x [outer, dim, inner],
// `count` indices of type I64 or I32 (negative ones count from the end).  An index outside
// [-dim, dim) is clamped into range: the kernel cannot raise an error and must not read outside x.
void gather_axis(std::size_t elem_size, const void* x, const void* idx, DType index_type, void* y, int64_t outer,
                 int64_t dim, int64_t inner, int64_t count, cudaStream_t s);

// GatherND and ScatterND: `rows` index tuples of `k` int64 entries address slices of `slice`
// contiguous elements of the data tensor (dims dim[0..k) with element strides stride[0..k) after
// the batch dims); with batch dims, row r belongs to batch r / rows_per_batch, whose data starts at
// batch * batch_stride.  Out-of-range indices are clamped like gather_axis's.
struct IndexND {
  int64_t rows = 0, rows_per_batch = 1, batch_stride = 0, slice = 1;
  int k = 0;
  int64_t dim[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};
// y [rows, slice] = the addressed slices of x.
void gather_nd(std::size_t elem_size, const void* x, const int64_t* idx, void* y, const IndexND& s, cudaStream_t st);
// y (already a copy of the data) gets updates [rows, slice] written into the addressed slices
// (reduction none: with duplicate indices one of the writes wins, as ONNX leaves it undefined).
void scatter_nd(std::size_t elem_size, const int64_t* idx, const void* updates, void* y, const IndexND& s, cudaStream_t st);
// The same with reduction add, mul, max or min: every update is combined into its slice (duplicates
// included, atomically), in float for the float types; types F32, F16, BF16, I64, I32.
enum class ScatterReduction : int { Add = 0, Mul, Max, Min };
void scatter_nd_reduce(DType t, ScatterReduction r, const int64_t* idx, const void* updates, void* y, const IndexND& s,
                       cudaStream_t st);

// Col2Im over 2-D images: x [n, c * kh * kw, oh * ow] of sliding blocks summed into y [n, c, h, w]
// (each output pixel gathers the blocks that cover it; float accumulation).
struct Col2ImShape {
  int64_t n = 0, c = 0, h = 0, w = 0, kh = 1, kw = 1, oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;   // strides, dilations, begin pads
};
void col2im(DType t, const void* x, void* y, const Col2ImShape& s, cudaStream_t st);

// CumSum along the middle axis of [outer, r, inner] (float types accumulate in float, I32 and I64
// in int64): exclusive leaves out each element itself, reverse sums from the end.
void cumsum(DType t, const void* x, void* y, int64_t outer, int64_t r, int64_t inner, bool exclusive, bool reverse,
            cudaStream_t s);

// Trilu over the last two dims of [batch, rows, cols]: keeps element (i, j) when j - i >= k (upper)
// or j - i <= k (lower), zero elsewhere.
void trilu(std::size_t elem_size, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t k,
           bool upper, cudaStream_t s);

// GroupNormalization and InstanceNormalization: x [n, channels, inner], channels in `groups`
// equal groups; each (sample, group) is normalized over its channels/groups * inner elements
// (mean and variance in float, two passes), then y = v * gamma[c] + beta[c] (float device arrays
// of `channels`, or null).  One block per (sample, group) (kernels_reduce.cu).
void group_norm(DType t, const void* x, void* y, int64_t n, int64_t channels, int64_t groups, int64_t inner, float eps,
                const float* gamma, const float* beta, cudaStream_t s);

// Fills n elements of elem_size bytes with the same bit pattern.
void fill(std::size_t elem_size, void* y, int64_t n, uint64_t bits, cudaStream_t s);

}  // namespace sluice::cuda
