#include "train/Evaluation.h"

#include "core/Capture.h"
#include "core/TransferGuard.h"

#include <chrono>
#include <string>

#include "core/Error.h"
#include "core/GraphSplit.h"
#include "pipeline/Schedule.h"

namespace sluice {

std::vector<int> mapEvalCuts(const OpGraph& train, const OpGraph& eval, const std::vector<int>& cuts) {
  // Walk both node lists: a training node of the same op as the next eval
  // node is that node; any other is training-only. firstEvalAtOrAfter[i]: the
  // first eval node matched at or after training node i (a cut before i).
  const auto& tn = train.nodes();
  const auto& en = eval.nodes();
  std::vector<int> firstEvalAtOrAfter(tn.size() + 1, static_cast<int>(en.size()));
  size_t j = 0;
  for (size_t i = 0; i < tn.size(); ++i) {
    firstEvalAtOrAfter[i] = static_cast<int>(j);
    if (j < en.size() && tn[i].op == en[j].op) ++j;
  }
  SLUICE_CHECK(j == en.size(), GraphError,
               "evaluation: the model's eval-mode graph does not follow its training graph (eval node "
                   << j << ", " << (j < en.size() ? en[j].op : std::string("-"))
                   << ", has no counterpart); evaluation needs the same ops in eval mode apart from training-only "
                      "updates. Set training.eval_interval: 0");
  std::vector<int> out;
  for (int k : cuts) out.push_back(firstEvalAtOrAfter.at(k));
  return out;
}

Evaluator::Evaluator(const Config& config, const ModelSetup& setup, const OpGraph& trainGraph,
                     const std::vector<int>& cuts, int stageIndex, int dpRank, Communicator pipelineComm,
                     Communicator dpComm, const pipeline::Schedule& schedule, std::vector<Communicator> boundaryComms)
    : c_(config), dpRank_(dpRank), classifier_(!setup.targetsAreInputs),
      device_(setup.device), dpComm_(std::move(dpComm)) {
  const auto evalGraph = setup.captureEval(config.training.microBatchSize);
  const auto evalCuts = mapEvalCuts(trainGraph, evalGraph, cuts);
  auto stages = splitGraph(evalGraph, evalCuts);
  if (config.data.kind == DataKind::Tokens) {
    const char* dtype = choiceName(tokenDtypeChoices(), config.data.tokenDtype);
    auto tokens = std::make_unique<data::TokenFile>(config.data.evalPath, dtype, config.model.blockSize,
                                                    config.model.vocabSize, config.job.seed);
    samples_ = tokens->windows();
    slice_ = [d = tokens.get()](int64_t b, int64_t e) { return d->slice(b, e); };
    data_ = std::move(tokens);
    classifier_ = false;  // one loss per window (the mean over its tokens), no accuracy
  } else {
    const char* split = choiceName(evalSplitChoices(), config.data.evalSplit);
    auto images = std::make_unique<data::FashionMnist>(config.data.path, split, config.job.seed);
    samples_ = images->samples();
    slice_ = [d = images.get()](int64_t b, int64_t e) { return d->slice(b, e); };
    data_ = std::move(images);
  }
  // Only the training schedule's stage-to-rank map matters here (evaluateMicroBatch() runs no schedule).
  for (int s : schedule.placement().stagesOf(stageIndex)) {
    workers_.push_back(std::make_unique<pipeline::StageWorker>(stages[s], setup.tensorsByName(stages[s].paramInputs),
                                                               pipelineComm, schedule, setup.loss, ExecMode::Eager,
                                                               boundaryComms, setup.device));
    if (config.pipeline.boundaryDtype == BoundaryDtype::Compute) workers_.back()->setBoundaryType(setup.computeType);
  }
}

EvalResult Evaluator::run() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t mbs = c_.training.microBatchSize, dp = c_.pipeline.dataParallel;
  int64_t n = samples_;
  if (c_.training.evalSamples > 0) n = std::min(n, c_.training.evalSamples);
  std::vector<pipeline::MicroBatch> mine;
  for (int64_t j = dpRank_; j < n / mbs; j += dp) {
    auto b = slice_(j * mbs, (j + 1) * mbs);
    TransferScope scope(TransferScope::Kind::Data);
    mine.push_back({b.input.to(device_), b.target.to(device_)});
  }
  pipeline::EvalSums sums;
  for (size_t mb = 0; mb < mine.size(); ++mb) {
    for (auto& w : workers_) w->evaluateMicroBatch(mine[mb], static_cast<int>(mb), classifier_, sums);
  }
  EvalResult r;
  for (auto& w : workers_) w->endStep();  // the last sends (evaluateMicroBatch() sends without waiting)
  if (!workers_.back()->isLast()) return r;
  auto t = torch::tensor({sums.loss, sums.correct, sums.samples}, torch::kDouble);
  dpComm_.allReduce(t);
  if (dpRank_ != 0) return r;
  auto a = t.accessor<double, 1>();
  r.samples = static_cast<int64_t>(a[2]);
  r.loss = a[2] > 0 ? a[0] / a[2] : 0;
  r.accuracy = !classifier_ ? -1 : a[2] > 0 ? a[1] / a[2] : 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace sluice
