// launch::faults: test-only fault injection, so that failure handling is
// tested on real ranks. Set SLUICE_FAULT to KIND:rank=R:step=S[:mb=M]:
//   throw               throw an Error in micro-batch M's forward (any if no mb)
//   hang                stop answering (the rank sends itself SIGSTOP)
//   kill                die at once (SIGKILL)
//   kill_in_checkpoint  die (SIGKILL) while writing the checkpoint of step S
//   nan                 turn this rank's gradients to NaN in step S
//   throw_in_profile    throw an Error in the profile, right before its
//                       collective refill measurement (no step)
//   hang_in_profile     stop answering (SIGSTOP) at the same point (no step:
//                       with one given, neither profile kind fires)
// Steps count from 0; S applies at the start of that step. Only the first
// run of a job injects (RESTART_COUNT unset or 0), so a restart can succeed.
// Without SLUICE_FAULT every call here returns at once.
#pragma once

#include <cstdint>

namespace sluice::faults {

void atStepStart(int rank, int64_t step);
void atForward(int rank, int64_t step, int microBatch);
void atCheckpointWrite(int rank, int64_t step);
bool nanAt(int rank, int64_t step);
void inProfile(int rank);

}  // namespace sluice::faults
