#pragma once
// nvJPEG's check macro and handle owners, in the style of core/cuda/cuda_check.h and cuda_raii.h:
// a failing call becomes a sluice::Error naming the call, file:line and nvJPEG's status name.
#include <nvjpeg.h>

#include "core/cuda/cuda_raii.h"
#include "core/error.h"

namespace sluice {

const char* nvjpeg_status_name(nvjpegStatus_t s);

}  // namespace sluice

#define NVJPEG_CHECK(call)                                                                              \
  do {                                                                                                  \
    const nvjpegStatus_t sluice_nvjpeg_st_ = (call);                                                    \
    if (sluice_nvjpeg_st_ != NVJPEG_STATUS_SUCCESS)                                                     \
      throw ::sluice::Error(::sluice::format_failure(#call, __FILE__, __LINE__,                         \
                                                     ::sluice::nvjpeg_status_name(sluice_nvjpeg_st_))); \
  } while (0)

namespace sluice::cuda {

namespace detail {
inline void destroy_nvjpeg(nvjpegHandle_t h) { (void)nvjpegDestroy(h); }
inline void destroy_nvjpeg_state(nvjpegJpegState_t s) { (void)nvjpegJpegStateDestroy(s); }
inline void destroy_nvjpeg_stream(nvjpegJpegStream_t s) { (void)nvjpegJpegStreamDestroy(s); }
}  // namespace detail

using NvjpegHandle = Handle<nvjpegHandle_t, detail::destroy_nvjpeg>;
using NvjpegState = Handle<nvjpegJpegState_t, detail::destroy_nvjpeg_state>;
using NvjpegStream = Handle<nvjpegJpegStream_t, detail::destroy_nvjpeg_stream>;

}  // namespace sluice::cuda
