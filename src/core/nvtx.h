#pragma once
// NVTX ranges that name every pipeline stage, so an Nsight Systems trace reads stage by stage.
// NVTX is header-only and costs a branch when no tool is attached; builds without the header
// compile the ranges away.
#include <string>

#if defined(SLUICE_HAVE_CUDA) || defined(SLUICE_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#define SLUICE_NVTX_ENABLED 1
#endif

namespace sluice {

// Fixed colours per stage so traces from different runs look alike.
enum class Stage : unsigned { GetBatch = 0xFFE05050, CopyToGpu = 0xFFE0C040, Compute = 0xFF40B050,
                              CopyToCpu = 0xFF4080E0, Write = 0xFFA060D0, Batch = 0xFF3050A0,
                              Other = 0xFF909090 };

#ifdef SLUICE_NVTX_ENABLED
inline nvtxEventAttributes_t nvtx_attributes(const char* name, Stage stage) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = static_cast<unsigned>(stage);
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  return a;
}
#endif

class NvtxRange {
 public:
  NvtxRange(const char* name, Stage stage = Stage::Other) {
#ifdef SLUICE_NVTX_ENABLED
    const nvtxEventAttributes_t a = nvtx_attributes(name, stage);
    nvtxRangePushEx(&a);
#else
    (void)name;
    (void)stage;
#endif
  }
  NvtxRange(const std::string& name, Stage stage = Stage::Other) : NvtxRange(name.c_str(), stage) {}
  ~NvtxRange() {
#ifdef SLUICE_NVTX_ENABLED
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// Start/end ranges can cross threads (one `batch N` range spans reader to writer).
class NvtxSpan {
 public:
  static unsigned long long start(const char* name, Stage stage = Stage::Batch);
  static void end(unsigned long long id);
};

}  // namespace sluice
