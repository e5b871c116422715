#include "telemetry/Metrics.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/Error.h"
#include "core/Files.h"
#include "core/HostSync.h"
#include "core/Log.h"
#include "launch/LauncherWatch.h"

namespace sluice {

namespace {

// The metrics lines of steps before `step` (a file from an earlier run). A
// line that is not a JSON object with a step (one cut short when that run
// was killed mid-write) is dropped.
std::string linesBefore(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) continue;
    if (record["step"].get<int64_t>() < step) kept += line + "\n";
  }
  return kept;
}

// v rounded to `decimals` places (a rate or a time: more digits are noise).
double rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(v) ? std::round(v * scale) / scale : v;
}

}  // namespace

// One JSON object per line (nlohmann-json writes it; JSON has no NaN, so a
// non-finite number is null).
void MetricsWriter::writeLine(const nlohmann::ordered_json& line, bool flush) {
  exitIfLauncherGone();  // Note [no orphans]: not a line after the launcher's death
  out_ << line.dump() << "\n";
  if (flush) {
    out_.flush();
    checkWritten();
  }
}

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
  nlohmann::ordered_json line{{"step", step}, {"eval_loss", loss}};
  if (accuracy >= 0) line["eval_accuracy"] = rounded(accuracy, 6);
  line["eval_samples"] = samples;
  writeLine(line);
  char text[128];
  std::string console = "eval after step " + std::to_string(step + 1) + "  eval_loss ";
  std::snprintf(text, sizeof(text), "%.4f", loss);
  console += text;
  if (accuracy >= 0) {
    std::snprintf(text, sizeof(text), "  eval_accuracy %.2f%%", 100 * accuracy);
    console += text;
  }
  std::snprintf(text, sizeof(text), "  (%lld samples, %.1f s)", static_cast<long long>(samples), seconds);
  log::info(console + text);
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
    const double gradNorm = r.gradNorm.defined() ? hostsync::read<double>(r.gradNorm) : 0;
    // Losses and norms exactly (the shortest decimal that reads back as the
    // same double); rates and times rounded.
    nlohmann::ordered_json line{{"step", r.step},
                                {"loss", loss},
                                {"lr", r.lr},
                                {"step_time_s", rounded(r.stepTimeSeconds, 6)},
                                {"samples_per_s", rounded(r.samples / r.stepTimeSeconds, 3)}};
    if (r.tokens > 0) line["tokens_per_s"] = rounded(r.tokens / r.stepTimeSeconds, 1);
    if (r.skipped) line["skipped"] = true;
    if (r.gradNorm.defined()) line["grad_norm"] = std::isfinite(gradNorm) ? nlohmann::ordered_json(gradNorm) : nullptr;
    if (r.lossScale > 0) line["loss_scale"] = r.lossScale;
    if (!r.stagePeakBytes.empty()) line["peak_bytes"] = r.stagePeakBytes;
    writeLine(line, /*flush=*/false);
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
