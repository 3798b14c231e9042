// Blocking one-off runs of an engine (cuda_engine.h): `sluice forward` and the tests.
#include <cstring>

#include "core/cuda/cuda_raii.h"
#include "core/error.h"
#include "engine/cuda/cuda_engine.h"

namespace sluice::cuda {

std::vector<Tensor> run_forward(Engine& e, const Tensor& input, int set) {
  const ValueInfo& in = e.input();
  if (input.dtype != in.dtype || input.shape != in.shape)
    throw InputError(str("input is ", dtype_name(input.dtype), " ", shape_str(input.shape), " but the engine expects ",
                         dtype_name(in.dtype), " ", shape_str(in.shape)));
  std::vector<Tensor> outs;
  if (!engine_stats(e)) {   // host buffers: a plain copy and a synchronous forward
    std::memcpy(e.input_buffer(set), input.bytes.data(), input.nbytes());
    e.forward(set, nullptr);
    for (std::size_t k = 0; k < e.outputs().size(); ++k) {
      const ValueInfo& o = e.outputs()[k];
      outs.emplace_back(o.dtype, o.shape);
      std::memcpy(outs.back().bytes.data(), e.output_buffer(set, static_cast<int>(k)), outs.back().nbytes());
    }
    return outs;
  }
  Stream stream = make_stream();
  CUDA_CHECK(cudaMemcpyAsync(e.input_buffer(set), input.bytes.data(), input.nbytes(), cudaMemcpyHostToDevice, stream));
  e.forward(set, stream.get());
  for (std::size_t k = 0; k < e.outputs().size(); ++k) {
    const ValueInfo& o = e.outputs()[k];
    outs.emplace_back(o.dtype, o.shape);
    CUDA_CHECK(cudaMemcpyAsync(outs.back().bytes.data(), e.output_buffer(set, static_cast<int>(k)), outs.back().nbytes(),
                               cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return outs;
}

}  // namespace sluice::cuda
