#include "core/nvtx.h"

namespace sluice {

unsigned long long NvtxSpan::start(const char* name, Stage stage) {
#ifdef SLUICE_NVTX_ENABLED
  const nvtxEventAttributes_t a = nvtx_attributes(name, stage);
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
