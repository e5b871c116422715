// Internal to the schedule builders (Schedule.cpp, ScheduleZeroBubble.cpp): the
// pieces they share. Not part of the pipeline's interface.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/Error.h"
#include "pipeline/Schedule.h"

namespace sluice::pipeline::detail {

inline void appendBackwardInput(std::vector<Action>& out, int stage, int stages, int mb) {
  if (stage < stages - 1) out.push_back({ActionKind::RecvGrad, mb, stage});
  out.push_back({ActionKind::BackwardInput, mb, stage});
  if (stage > 0) out.push_back({ActionKind::SendGrad, mb, stage});
}

inline void checkDims(int stages, int microBatches) {
  SLUICE_CHECK(stages >= 1, ScheduleError, "a schedule needs at least 1 stage (got " << stages << ")");
  SLUICE_CHECK(microBatches >= 1, ScheduleError, "a schedule needs at least 1 micro-batch (got " << microBatches << ")");
}

// Interleaved 1F1B's piece order: the k-th forward (backward) piece of rank
// r. Micro-batches in groups of p, each group through every chunk (backwards:
// from the last chunk down); with v = 1, 1F1B's order.
struct PieceOrder {
  int p, v, m;
  int microBatchOf(int k) const { return (k / (p * v)) * p + k % p; }
  int forwardStage(int k, int r) const { return ((k / p) % v) * p + r; }
  int backwardStage(int k, int r) const { return (v - 1 - (k / p) % v) * p + r; }
  // Forward pieces rank r runs before its first backward (v > 1). With m == p
  // there is no steady phase to overlap: all of them.
  int warmup(int r) const { return m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v); }
};

// `what`: what the messages call the schedule (its row's name through makeSchedule).
inline void checkInterleaved(const std::string& what, int ranks, int chunks, int microBatches) {
  checkDims(ranks, microBatches);
  SLUICE_CHECK(chunks >= 1, ScheduleError, what << ": chunks per rank must be at least 1 (got " << chunks << ")");
  SLUICE_CHECK(microBatches % ranks == 0, ScheduleError,
               what << " takes micro-batches p at a time: pipeline.microbatches (" << microBatches
                    << ") must be a multiple of pipeline.stages (" << ranks << ")");
}


}  // namespace sluice::pipeline::detail
