// optim::fusedAdamW: the AdamW update of torch::optim::AdamW (LibTorch 1.13)
// on a contiguous range of floats in one pass: for each element, the moments,
// the bias-corrected step and the decoupled weight decay, written to the
// parameter and to a second output (DistAdam's all-gather buffer).
//
// Ten tensor ops made ten passes over the range (each a read and a write of
// 4 bytes per element, on a rank's whole shard); this reads g, m, v, p once
// and writes m, v, p, out once. The arithmetic is the same sequence of IEEE
// operations as torch's, each rounded to float (no fused multiply-add: the
// file builds with -ffp-contract=off), so every machine computes the same
// bits; torch's own vectorized kernels use FMA in places, so results equal
// torch::optim::AdamW's within a few ulp, not bitwise.
#pragma once

#include <cstdint>

namespace at {
class Tensor;
}  // namespace at

namespace sluice::optim {

struct AdamWStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  int64_t step = 1;  // this update's step count, from 1 (bias correction)
};

// p, m, v updated in place; out[i] = the new p[i]. out may be null.
void fusedAdamW(float* p, float* out, const float* grad, float* expAvg, float* expAvgSq, int64_t count,
                const AdamWStep& s);

// The same update with tensor ops, for tensors on a device (CUDA): torch's
// own sequence (torch::optim::AdamW's non-foreach path), on the device's
// stream. All four are 1-D float views of the same length, updated in place
// (DeviceAdamW.cpp).
void adamWOnDevice(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& expAvg, const at::Tensor& expAvgSq,
                   const AdamWStep& s);

}  // namespace sluice::optim
