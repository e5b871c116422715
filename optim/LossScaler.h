// optim::LossScaler: dynamic loss scaling for training.precision: fp16, as
// torch.amp.GradScaler does it, decided alike on every rank of a pipeline x
// data-parallel job.
//
//   optim::LossScaler scaler(65536, 2000);
//   worker.setLossScale(scaler.scale());         // backward seeded with it
//   ... backward; overflow = any non-finite gradient on any rank (all-reduced)
//   const double used = scaler.scale();
//   switch (scaler.update(overflow)) {
//     case Outcome::Apply: scaleGradients(optimizer, params, 1 / used); step(); break;
//     case Outcome::BackOff: skip the update; break;   // scale() is now used / 2
//     case Outcome::NonFinite: training.nan_policy decides; break;
//   }
//
// Note [fp16 loss scaling]: every micro-batch's backward is seeded with the
// scale instead of 1 (pipeline::StageWorker::setLossScale), so every gradient
// the stages compute, float16 and float32 alike, is the true one times the
// scale, and small float16 gradients that would flush to zero survive. The
// scale is a power of two: multiplying by it and by its inverse is exact in
// binary floating point short of overflow and subnormals, so where nothing
// overflows the unscaled gradients are bitwise those of the same arithmetic
// unscaled, and pipeline layouts stay bitwise equal to one process (which
// runs the same kernels on the same values). The scale lives on the host:
// the overflow flag is read once per step (fp16 needs the decision before
// the update), and that read is the only one fp16 adds.
//   - overflow (any rank): the update is skipped and the scale halves;
//   - otherwise the gradients are unscaled before clipping and the update,
//     and after `window` applied steps in a row the scale doubles;
//   - an overflow at scale 1 is not a scaling problem (a NaN or inf the
//     forward made, say): update() returns NonFinite and keeps scale 1.
// Checkpoints store scale() and goodSteps(), so a resume continues exactly.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::optim {

class LossScaler {
 public:
  enum class Outcome { Apply, BackOff, NonFinite };

  // initial: a power of two >= 1; window >= 1 (OptimError otherwise).
  LossScaler(double initial, int64_t window);

  double scale() const { return scale_; }
  // Applied steps since the scale last changed.
  int64_t goodSteps() const { return goodSteps_; }

  // The step's outcome, the same on every rank given the same flag.
  Outcome update(bool overflow);

  // A checkpoint's state (the same checks as the constructor's).
  void restore(double scale, int64_t goodSteps);

 private:
  double scale_;
  int64_t window_;
  int64_t goodSteps_ = 0;
};

// Whether x is a power of two >= 1 that a float holds exactly.
bool isLossScale(double x);

// A scale for a log line: "65536".
std::string scaleText(double scale);

}  // namespace sluice::optim
