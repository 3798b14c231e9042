#include "core/nvtx.h"

namespace sluice {

unsigned long long NvtxSpan::start(const char* name, Stage stage) {
#ifdef SLUICE_NVTX_ENABLED
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = static_cast<unsigned>(stage);
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  return nvtxRangeStartEx(&a);
#else
  (void)name;
  (void)stage;
  return 0;
#endif
}

void NvtxSpan::end(unsigned long long id) {
#ifdef SLUICE_NVTX_ENABLED
  nvtxRangeEnd(id);
#else
  (void)id;
#endif
}

}  // namespace sluice
