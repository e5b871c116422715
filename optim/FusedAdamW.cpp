#include "optim/FusedAdamW.h"

#include <cmath>

namespace sluice::optim {
namespace {

// Kept apart so that the compiler vectorizes it (no aliasing, no errno from
// sqrt: -fno-math-errno); target_clones picks AVX-512, AVX2 or SSE2 at load time.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void update(float* __restrict p, float* __restrict out, const float* __restrict g, float* __restrict m,
            float* __restrict v, int64_t n, float decay, float beta1, float oneMinusBeta1, float beta2,
            float oneMinusBeta2, float sqrtBc2, float eps, float negStepSize) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    // torch: exp_avg.mul_(beta1).add_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    const float mi = m[i] * beta1 + oneMinusBeta1 * gi;
    const float vi = v[i] * beta2 + oneMinusBeta2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    // torch: denom = (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps); p.mul_(1 - lr * wd); p.addcdiv_(exp_avg, denom, -lr / bc1)
    const float denom = std::sqrt(vi) / sqrtBc2 + eps;
    const float pi = p[i] * decay + negStepSize * (mi / denom);
    p[i] = pi;
    if (out) out[i] = pi;
  }
}

}  // namespace

void fusedAdamW(float* p, float* out, const float* grad, float* expAvg, float* expAvgSq, int64_t count,
                const AdamWStep& s) {
  if (count <= 0) return;
  const double bc1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bc2 = 1 - std::pow(s.beta2, static_cast<double>(s.step));
  update(p, out, grad, expAvg, expAvgSq, count, static_cast<float>(1 - s.lr * s.weightDecay),
         static_cast<float>(s.beta1), static_cast<float>(1 - s.beta1), static_cast<float>(s.beta2),
         static_cast<float>(1 - s.beta2), static_cast<float>(std::sqrt(bc2)), static_cast<float>(s.eps),
         static_cast<float>(-s.lr / bc1));
}

}  // namespace sluice::optim
