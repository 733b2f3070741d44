// A kernel that keeps the stream busy for a while, so that a timing loop's launches are all
// enqueued before the first of them runs: the events around the loop then measure the GPU's time
// alone, not the host's enqueue rate. cuDNN's multi-kernel algorithms (Winograd: four kernels per
// call) cost more host time per call than GPU time on ResNet-50's late layers, and timed without
// a hold they measured far slower than they run in the model's CUDA graph, so the conv tuner
// passed them over.
#pragma once
#include <cuda_runtime.h>

namespace fusec::cuda {

/// Enqueues a single-thread kernel on s that returns after `microseconds` of GPU time.
void launch_gpu_hold(cudaStream_t s, int microseconds);

}  // namespace fusec::cuda
