// Run outputs: metrics.jsonl (one JSON object per optimizer step) and the
// console progress line. Written by the rank that holds the loss (the last
// pipeline stage). Losses arrive as tensors and are read only at log points
// (Note [lazy loss]: the host never waits for a step's result in between).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "telemetry/TensorBoard.h"

namespace sluice {

struct StepRecord {
  int64_t step = 0;
  at::Tensor loss;  // scalar, read at flush()
  double lr = 0;
  double stepTimeSeconds = 0;
  int64_t samples = 0;
  int64_t tokens = 0;  // 0 when tokens do not apply
  bool skipped = false;  // training.nan_policy skip dropped this step's update
  // Per stage, the step's peak of allocated bytes (max over replicas; the
  // counting allocator, less what lives outside the model); empty: not measured.
  std::vector<int64_t> stagePeakBytes;
  // optimizer.clip_grad_norm: the global gradient norm before clipping (a
  // scalar read at flush()); undefined: not clipped (off, or a skipped step).
  at::Tensor gradNorm;
  double lossScale = 0;  // training.precision fp16: the step's loss scale; 0: none
};

class MetricsWriter {
 public:
  // Starts path afresh; or, resuming at step resumeStep (>= 0), keeps its lines
  // of earlier steps and appends after them (lines of later steps, from a run
  // that went past its last checkpoint, are dropped). totalSteps: for the ETA.
  MetricsWriter(const std::string& path, int64_t totalSteps, int64_t resumeStep = -1);
  void record(StepRecord record);
  // Reads the pending losses, appends their lines, prints one progress line.
  void flush();
  double lastLoss() const { return lastLoss_; }
  // An evaluation after step `step` (0-based, as the step lines): a line
  // {"step", "eval_loss", "eval_accuracy" (accuracy >= 0 only), "eval_samples"},
  // the console line, and the TensorBoard scalars.
  void recordEval(int64_t step, double loss, double accuracy, int64_t samples, double seconds);
  // Also write each step's scalars there (logging.tensorboard).
  void setTensorBoard(std::unique_ptr<TensorBoardWriter> tb) { tb_ = std::move(tb); }

 private:
  void writeLine(const nlohmann::ordered_json& line, bool flush = true);
  void checkWritten();  // Error when a write to the file failed (e.g. a full disk)
  std::ofstream out_;
  std::string path_;
  int64_t totalSteps_;
  std::vector<StepRecord> pending_;
  double elapsed_ = 0;
  int64_t stepsDone_ = 0;
  double lastLoss_ = 0;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace sluice
