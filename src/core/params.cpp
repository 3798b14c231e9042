#include "core/params.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/error.h"

namespace sluice {

namespace {

// SLUICE_CUDA_ATROUS: off (or 0), a dilation >= 2, or a dilation followed by ":all".
bool atrous_value(const std::string& s) {
  if (s == "off" || s == "0") return true;
  char* end = nullptr;
  const long d = std::strtol(s.c_str(), &end, 10);
  const std::string rest = end;
  return end != s.c_str() && d >= 2 && (rest.empty() || rest == ":all");
}

using K = ParamKind;
using C = ParamClass;
using R = ParamRead;

// The table, a function's static: core/log.cpp reads SLUICE_LOG_LEVEL during static initialization,
// before a namespace-scope vector of this file need exist.  The defaults and polarities are those
// each reader had before the table existed (issue 37 item 5); Once marks the readers that always
// kept their first read for the process.
const std::vector<Param>& table() {
  static const std::vector<Param> kParams = {
      // ---- for users ----
      {"SLUICE_LOG_LEVEL", K::Enum, C::User, R::Once, "info", "debug|info|warning|error",
       "the starting log level (debug shows the engines' start-up choices and timings)"},
      {"SLUICE_LOCK_WAIT_S", K::Double, C::User, R::AtUse, "120", "0..",
       "seconds to wait for a lock held by a process on its way out (or a reader) before refusing"},
      // ---- for the tests ----
      {"SLUICE_CLOCK_SKEW_S", K::Double, C::Test, R::Once, "0", "",
       "seconds added to this process's wall clock (to test the cluster's clock-offset handling)"},
      {"SLUICE_IMAGE_STATS", K::On, C::Test, R::AtUse, "0", "",
       "1: the GPU image input prints its decode statistics at the end"},
      // ---- graph passes (model/): 0 turns one off, to compare ----
      {"SLUICE_PUSH_TRANSPOSES", K::On, C::Measure, R::AtUse, "1", "", "the pass that sinks Transposes below elementwise ops"},
      {"SLUICE_STEM_S2D", K::On, C::Measure, R::AtUse, "1", "", "a strided stem convolution becomes space-to-depth plus a stride-1 convolution"},
      {"SLUICE_STEM_S2D_PAD", K::On, C::Measure, R::AtUse, "1", "", "space-to-depth stems zero their channels up to a multiple of 8"},
      {"SLUICE_PATCH_GEMM", K::On, C::Measure, R::AtUse, "1", "", "patch-embedding convolutions (kernel = stride) become one product"},
      {"SLUICE_FUSE_CONV_GELU", K::On, C::Measure, R::AtUse, "0", "", "1: a convolution followed by GELU becomes one node (off by default)"},
      {"SLUICE_SEQUENCE_VIEWS", K::On, C::Measure, R::AtUse, "1", "", "sequence reshapes around products become views"},
      {"SLUICE_CANCEL_TRANSPOSES", K::On, C::Measure, R::AtUse, "1", "", "inverse Transpose pairs cancel"},
      {"SLUICE_DROP_EMPTY_PADS", K::On, C::Measure, R::AtUse, "1", "", "Pads of zero width are dropped"},
      {"SLUICE_FOLD_SCALE", K::On, C::Measure, R::AtUse, "1", "", "constant scales fold into the product before them"},
      {"SLUICE_FUSE_ATTENTION", K::On, C::Measure, R::AtUse, "1", "", "attention subgraphs become one fused attention node"},
      {"SLUICE_ATTENTION_LAYOUT", K::On, C::Measure, R::AtUse, "1", "", "the attention layout pass (heads split without transposes)"},
      {"SLUICE_ATTENTION_LAYOUT_WINDOWS", K::On, C::Measure, R::AtUse, "1", "", "the attention layout pass also handles windowed (Swin) attention"},
      // ---- the CUDA engine's paths ----
      {"SLUICE_CUDA_FAST", K::On, C::Measure, R::Once, "1", "", "the vectorized kernels and own depthwise convolution (0: the plain kernels and cuDNN)"},
      {"SLUICE_CUDA_LAYOUT", K::Enum, C::Measure, R::AtUse, "auto", "auto|nchw|nhwc",
       "the convolutions' layout (auto: channels-last below fp32, NCHW at fp32)"},
      {"SLUICE_CUDA_RESIDUAL_FP32", K::On, C::Measure, R::AtUse, "1", "", "fp16/bf16: transformer blocks' residual stream stays fp32"},
      {"SLUICE_CUDA_STEM_PAD", K::Enum, C::Measure, R::Once, "4", "0|4|8", "channels-last stems zero their channels up to this multiple (0: none)"},
      {"SLUICE_CUDA_ATTENTION", K::Enum, C::Measure, R::AtUse, "auto", "auto|gemm|cudnn|window", "force one attention path (auto: timed at start-up)"},
      {"SLUICE_CUDA_WINDOW_ATTENTION", K::On, C::Measure, R::AtUse, "1", "", "the own one-pass window-attention kernel is a candidate"},
      {"SLUICE_CUDA_ATROUS", K::Text, C::Measure, R::AtUse, "", "off, a dilation D >= 2 (the smallest it takes), or D:all (NCHW too)",
       "dilated convolutions as strided dense ones (the atrous path)", atrous_value},
      {"SLUICE_CUDA_CONV_GEMM", K::Enum, C::Measure, R::AtUse, "1", "0|1|force", "1x1 convolutions as cuBLASLt products (1: when timed faster; force: wherever they apply)"},
      {"SLUICE_CUDA_CONV_GRAPH", K::Enum, C::Measure, R::Once, "0", "0|1|force", "cuDNN graph convolutions (1: when faster than the legacy call; force: always)"},
      {"SLUICE_CUDA_DEPTHWISE_TILE", K::On, C::Measure, R::AtUse, "1", "", "the depthwise tile kernel (0: the row kernel there)"},
      {"SLUICE_CUDA_DEPTHWISE_ROWS", K::On, C::Measure, R::AtUse, "1", "", "the depthwise row kernel (0: the one-pixel kernel everywhere)"},
      {"SLUICE_CUDA_GEMM_EPILOGUE", K::On, C::Measure, R::AtUse, "1", "", "bias and activation in the products' epilogue"},
      {"SLUICE_CUDA_GEMM_RESIDUAL", K::On, C::Measure, R::AtUse, "1", "", "a residual Add taken into the product before it"},
      {"SLUICE_CUDA_GEMM_TUNE", K::Enum, C::Measure, R::AtUse, "1", "0|1|quick|full", "cuBLASLt algorithm choice (0: the first candidate, no cache; 1: as --autotune)"},
      {"SLUICE_CUDA_LAYOUT_VIEWS", K::On, C::Measure, R::AtUse, "1", "", "layout Transposes of plain tensors become views"},
      {"SLUICE_CUDA_SPACE_TO_DEPTH", K::On, C::Measure, R::AtUse, "1", "", "the own space-to-depth kernel"},
      {"SLUICE_CUDA_PATCHIFY", K::On, C::Measure, R::AtUse, "1", "", "the own patchify permutation kernel"},
      {"SLUICE_CUDA_NORM_VEC", K::On, C::Measure, R::AtUse, "1", "", "the vectorized normalization kernels"},
      {"SLUICE_CUDA_FUSE_SWISH", K::On, C::Measure, R::AtUse, "1", "", "x * sigmoid(a x) chains become one step"},
      {"SLUICE_CUDA_SWISH", K::Enum, C::Measure, R::AtUse, "fast", "fast|exact|generic", "the fused swish step's kernel"},
      {"SLUICE_CUDA_SWISH_BIAS", K::On, C::Measure, R::AtUse, "0", "", "1: the bias Add before a swish chain is taken into its step (off by default)"},
      {"SLUICE_CUDA_FUSE_TAILS", K::On, C::Measure, R::Once, "1", "", "a head's resize and output cast fuse into one tail step"},
      {"SLUICE_CUDA_RESIZE_VIEWS", K::On, C::Measure, R::AtUse, "1", "", "resizes that keep an axis read it as a view"},
      // ---- the GPU image input ----
      {"SLUICE_IMAGE_DECODER", K::Enum, C::Measure, R::AtUse, "auto", "auto|hardware|hybrid", "the nvJPEG backend"},
      {"SLUICE_DECODE_OVERLAP", K::Int, C::Measure, R::AtUse, "0", "0..8", "nvJPEG on the driver thread (0), on 2 decode threads (1), or on N (2..8)"},
      {"SLUICE_DECODE_HANDLES", K::Enum, C::Measure, R::AtUse, "shared", "shared|own", "one nvJPEG handle for the decode threads, or one each"},
  };
  return kParams;
}

// The values Once entries read first, by index in the table.
std::mutex g_once_mutex;   // constant-initialized
std::vector<std::optional<std::string>>& once_values() {
  static std::vector<std::optional<std::string>> v(table().size());
  return v;
}

std::vector<std::string> split_values(const char* values) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* c = values; *c; ++c)
    if (*c == '|') out.push_back(std::move(cur)), cur.clear();
    else cur += *c;
  out.push_back(cur);
  return out;
}

// "a, b or c"
std::string listed(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return s;
}

bool parse_int(const std::string& s, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || errno == ERANGE) return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || errno == ERANGE || !(v == v)) return false;
  *out = v;
  return true;
}

// The two ends of "min..max" (an empty end: unbounded).
void range_of(const Param& p, std::string* lo, std::string* hi) {
  const std::string r = p.values;
  const auto dots = r.find("..");
  *lo = dots == std::string::npos ? "" : r.substr(0, dots);
  *hi = dots == std::string::npos ? "" : r.substr(dots + 2);
}

std::size_t index_of(const std::string& name) {
  const auto& t = table();
  for (std::size_t i = 0; i < t.size(); ++i)
    if (name == t[i].name) return i;
  SLUICE_THROW("the environment switch ", name, " is not declared in src/core/params.cpp's table");
}

// The value to parse: the environment's (for Once entries, the first one read), or the default when
// unset or empty.  Checked against the entry, and the entry must be of `kind`.
std::string value_of(const char* name, ParamKind kind) {
  const std::size_t i = index_of(name);
  const Param& p = table()[i];
  if (p.kind != kind)
    SLUICE_THROW("the environment switch ", name, " is ", param_kind_name(p.kind), ", read as ", param_kind_name(kind));
  std::string v;
  if (p.read == ParamRead::Once) {
    std::lock_guard<std::mutex> lock(g_once_mutex);
    auto& once = once_values()[i];
    if (!once) {
      const char* e = std::getenv(name);
      once = e ? e : "";
    }
    v = *once;
  } else if (const char* e = std::getenv(name)) {
    v = e;
  }
  if (v.empty()) return p.def;
  check_param_value(p, v);
  return v;
}

}  // namespace

const std::vector<Param>& params() { return table(); }

const Param& param(const std::string& name) { return table()[index_of(name)]; }

const char* param_kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::On: return "on/off";
    case ParamKind::Int: return "integer";
    case ParamKind::Double: return "number";
    case ParamKind::Enum: return "enum";
    case ParamKind::Text: return "text";
  }
  return "?";
}

const char* param_class_name(ParamClass c) {
  switch (c) {
    case ParamClass::User: return "user";
    case ParamClass::Test: return "test";
    case ParamClass::Measure: return "measure";
  }
  return "?";
}

void check_param_value(const Param& p, const std::string& v) {
  const auto refuse = [&](const std::string& takes) {
    throw UsageError(str(p.name, " must be ", takes, ", not '", v, "'"), str("unset it for its default (", p.def[0] ? p.def : "none",
                                                                           "); `sluice params` lists the switches"));
  };
  switch (p.kind) {
    case ParamKind::On:
      if (v != "0" && v != "1") refuse("0 or 1");
      return;
    case ParamKind::Int:
    case ParamKind::Double: {
      std::string lo, hi;
      range_of(p, &lo, &hi);
      const std::string takes = str(p.kind == ParamKind::Int ? "an integer" : "a number",
                                    !lo.empty() && !hi.empty() ? str(" from ", lo, " to ", hi)
                                    : !lo.empty()              ? str(" >= ", lo)
                                    : !hi.empty()              ? str(" <= ", hi)
                                                               : std::string());
      double x = 0, bound = 0;
      if (p.kind == ParamKind::Int) {
        int64_t n = 0;
        if (!parse_int(v, &n)) refuse(takes);
        x = static_cast<double>(n);
      } else if (!parse_double(v, &x)) {
        refuse(takes);
      }
      if ((!lo.empty() && parse_double(lo, &bound) && x < bound) || (!hi.empty() && parse_double(hi, &bound) && x > bound))
        refuse(takes);
      return;
    }
    case ParamKind::Enum: {
      const auto allowed = split_values(p.values);
      for (const auto& a : allowed)
        if (v == a) return;
      refuse(listed(allowed));
      return;
    }
    case ParamKind::Text:
      if (p.valid && !p.valid(v)) refuse(p.values);
      return;
  }
}

bool param_on(const char* name) { return value_of(name, ParamKind::On) == "1"; }

int64_t param_int(const char* name) {
  int64_t n = 0;
  parse_int(value_of(name, ParamKind::Int), &n);
  return n;
}

double param_double(const char* name) {
  double x = 0;
  parse_double(value_of(name, ParamKind::Double), &x);
  return x;
}

std::string param_string(const char* name) {
  const Param& p = param(name);
  return value_of(name, p.kind == ParamKind::Text ? ParamKind::Text : ParamKind::Enum);
}

}  // namespace sluice
