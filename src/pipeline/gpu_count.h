#pragma once
namespace sluice {
int gpu_count();     // CUDA devices visible to this process; 0 without a driver or a CUDA build
bool cuda_built();   // whether this binary has the CUDA backend
}  // namespace sluice
