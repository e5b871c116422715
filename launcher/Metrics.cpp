#include "launcher/Metrics.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>

#include "core/Error.h"
#include "core/Files.h"
#include "core/HostSync.h"
#include "core/Log.h"

namespace sluice {

namespace {

// The metrics lines of steps before `step` (a file from an earlier run).
std::string linesBefore(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    auto at = line.find("\"step\": ");
    if (at == std::string::npos) continue;
    if (std::atoll(line.c_str() + at + 8) < step) kept += line + "\n";
  }
  return kept;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t totalSteps, int64_t resumeStep)
    : path_(path), totalSteps_(totalSteps) {
  if (resumeStep >= 0) {
    writeFileAtomically(path, linesBefore(path, resumeStep));
    out_.open(path, std::ios::app);
  } else {
    out_.open(path, std::ios::trunc);
  }
  SLUICE_CHECK(out_, Error, "cannot write metrics file " << path);
}

void MetricsWriter::record(StepRecord record) { pending_.push_back(std::move(record)); }

// A full disk must stop the job with the reason, not let it end with exit 0
// and a metrics file cut short.
void MetricsWriter::checkWritten() {
  SLUICE_CHECK(out_.good(), Error,
               "writing metrics file " << path_ << " failed: " << std::strerror(errno)
                                       << " (its last line may be cut short); free space there, then resume");
}

void MetricsWriter::recordEval(int64_t step, double loss, double accuracy, int64_t samples, double seconds) {
  char line[256];
  std::snprintf(line, sizeof(line), "{\"step\": %lld, \"eval_loss\": %.9g", static_cast<long long>(step), loss);
  out_ << line;
  if (accuracy >= 0) {
    std::snprintf(line, sizeof(line), ", \"eval_accuracy\": %.6f", accuracy);
    out_ << line;
  }
  out_ << ", \"eval_samples\": " << samples << "}\n";
  out_.flush();
  checkWritten();
  std::string console = "eval after step " + std::to_string(step + 1) + "  eval_loss ";
  std::snprintf(line, sizeof(line), "%.4f", loss);
  console += line;
  if (accuracy >= 0) {
    std::snprintf(line, sizeof(line), "  eval_accuracy %.2f%%", 100 * accuracy);
    console += line;
  }
  std::snprintf(line, sizeof(line), "  (%lld samples, %.1f s)", static_cast<long long>(samples), seconds);
  log::info(console + line);
  if (tb_) {
    tb_->scalar("eval_loss", loss, step);
    if (accuracy >= 0) tb_->scalar("eval_accuracy", accuracy, step);
    tb_->flush();
  }
}

void MetricsWriter::flush() {
  if (pending_.empty()) return;
  double windowTime = 0;
  int64_t windowSamples = 0, windowTokens = 0;
  for (auto& r : pending_) {
    const double loss = hostsync::read<double>(r.loss);
    SLUICE_CHECK(std::isfinite(loss) || r.skipped, Error,
                 "loss is " << loss << " at step " << r.step << "; stopping (lower optimizer.lr, or set "
                            << "training.nan_policy: skip to drop such steps)");
    char line[512];
    std::snprintf(line, sizeof(line),
                  "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"step_time_s\": %.6f, \"samples_per_s\": %.3f",
                  static_cast<long long>(r.step), loss, r.lr, r.stepTimeSeconds, r.samples / r.stepTimeSeconds);
    out_ << line;
    if (r.tokens > 0) {
      std::snprintf(line, sizeof(line), ", \"tokens_per_s\": %.1f", r.tokens / r.stepTimeSeconds);
      out_ << line;
    }
    if (r.skipped) out_ << ", \"skipped\": true";
    const double gradNorm = r.gradNorm.defined() ? hostsync::read<double>(r.gradNorm) : 0;
    if (r.gradNorm.defined() && std::isfinite(gradNorm)) {
      std::snprintf(line, sizeof(line), ", \"grad_norm\": %.9g", gradNorm);
      out_ << line;
    } else if (r.gradNorm.defined()) {
      out_ << ", \"grad_norm\": null";  // not finite (JSON has no NaN)
    }
    if (r.lossScale > 0) {
      std::snprintf(line, sizeof(line), ", \"loss_scale\": %.0f", r.lossScale);
      out_ << line;
    }
    if (!r.stagePeakBytes.empty()) {
      out_ << ", \"peak_bytes\": [";
      for (size_t i = 0; i < r.stagePeakBytes.size(); ++i) out_ << (i ? ", " : "") << r.stagePeakBytes[i];
      out_ << "]";
    }
    out_ << "}\n";
    if (tb_) {
      tb_->scalar("loss", loss, r.step);
      tb_->scalar("lr", r.lr, r.step);
      tb_->scalar("step_time_s", r.stepTimeSeconds, r.step);
      tb_->scalar("samples_per_s", r.samples / r.stepTimeSeconds, r.step);
      if (r.tokens > 0) tb_->scalar("tokens_per_s", r.tokens / r.stepTimeSeconds, r.step);
      if (r.gradNorm.defined()) tb_->scalar("grad_norm", gradNorm, r.step);
      if (r.lossScale > 0) tb_->scalar("loss_scale", r.lossScale, r.step);
      for (size_t i = 0; i < r.stagePeakBytes.size(); ++i) {
        tb_->scalar("peak_bytes/stage_" + std::to_string(i), static_cast<double>(r.stagePeakBytes[i]), r.step);
      }
    }
    windowTime += r.stepTimeSeconds;
    windowSamples += r.samples;
    windowTokens += r.tokens;
    lastLoss_ = loss;
  }
  out_.flush();
  checkWritten();
  if (tb_) tb_->flush();
  elapsed_ += windowTime;
  stepsDone_ += static_cast<int64_t>(pending_.size());
  const int64_t lastStep = pending_.back().step;
  const double eta = stepsDone_ > 0 ? elapsed_ / stepsDone_ * (totalSteps_ - lastStep - 1) : 0;
  char msg[256];
  if (windowTokens > 0) {
    std::snprintf(msg, sizeof(msg), "step %lld/%lld  loss %.4f  %.0f tokens/s  %.3f s/step  ETA %.0fs",
                  static_cast<long long>(lastStep + 1), static_cast<long long>(totalSteps_), lastLoss_,
                  windowTokens / windowTime, windowTime / pending_.size(), eta);
  } else {
    std::snprintf(msg, sizeof(msg), "step %lld/%lld  loss %.4f  %.0f samples/s  %.3f s/step  ETA %.0fs",
                  static_cast<long long>(lastStep + 1), static_cast<long long>(totalSteps_), lastLoss_,
                  windowSamples / windowTime, windowTime / pending_.size(), eta);
  }
  log::info(msg);
  pending_.clear();
}

}  // namespace sluice
