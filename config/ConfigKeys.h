// Internal to config/Config.cpp: every config key, spelled once.
//
// visitKeys walks the sections and keys of a Config in one order. Reading a
// YAML file (Config.cpp's KeyReader: unknown keys refused, each value's type
// checked), writing config.resolved.yaml (KeyWriter) and the list of keys
// (configKeys(), which README.md's key table is checked against) are three
// visitors of this one list; validation of the values is apart
// (ConfigValidate.cpp). A visitor V has:
//   v.section(name, f)            f(sub) visits the keys of section `name`
//   v.key(name, field, shown)     a value; `shown`: written to
//                                 config.resolved.yaml (the keys that apply
//                                 to this model), always read
//   v.choice(name, field, nameOf, parse)   a typed choice read by name
//   v.choice(name, field, table, what)     the same from a Choice table (core/Choice.h)
//   v.derive(f)                   a default that depends on keys read before
//                                 it (run when reading only)
// Adding a key: one line here, its field in Config.h, its check in
// ConfigValidate.cpp and its row in README.md's key table.
#pragma once

#include <optional>

#include "core/CommBackendKind.h"
#include "core/DeviceKind.h"
#include "core/TransferGuard.h"
#include "config/Config.h"

namespace sluice {

template <class S>
void jobKeys(S& s, Config& c) {
  s.key("name", c.job.name);
  s.key("output_dir", c.job.outputDir);
  s.key("overwrite", c.job.overwrite);
  s.key("seed", c.job.seed);
  s.key("threads_per_rank", c.job.threadsPerRank);
  s.choice("device", c.job.device, deviceKindName, parseDeviceKind);
  s.choice(
      "backend", c.job.backend,
      [](const std::optional<CommBackendKind>& b) { return b ? commBackendName(*b) : "auto"; },
      [](const std::string& name) -> std::optional<CommBackendKind> {
        if (name == "auto") return std::nullopt;
        try {
          return parseCommBackend(name);
        } catch (const ConfigError&) {
          throw ConfigError("unknown backend '" + name + "' (expected auto | mpi | nccl)");
        }
      });
}

template <class S>
void modelKeys(S& s, Config& c) {
  auto& m = c.model;
  s.choice("name", m.spec, modelChoices(), "model");
  // A key is shown (written to config.resolved.yaml) for the models that read it (their spec's keys).
  auto reads = [&m](const char* key) { return m.spec->reads(key); };
  s.key("vocab_size", m.vocabSize, reads("vocab_size"));
  s.key("block_size", m.blockSize, reads("block_size"));
  s.key("layers", m.layers, reads("layers"));
  s.key("heads", m.heads, reads("heads"));
  s.key("embd", m.embd, reads("embd"));
  s.key("dropout", m.dropout, reads("dropout"));
  s.derive([&] { m.attnDropout = m.dropout; });
  s.key("attn_dropout", m.attnDropout, reads("attn_dropout"));
  s.key("fuse_attention", m.fuseAttention);
  s.derive([&] { m.tieEmbeddings = m.spec->tiesEmbeddings; });
  s.key("tie_embeddings", m.tieEmbeddings, reads("tie_embeddings"));
  s.key("kv_heads", m.kvHeads, reads("kv_heads"));
  s.key("ffn_hidden", m.ffnHidden, reads("ffn_hidden"));
  s.key("input_dim", m.inputDim, reads("input_dim"));
  s.key("hidden", m.hidden, reads("hidden"));
  s.key("mlp_layers", m.mlpLayers, reads("mlp_layers"));
  s.key("classes", m.classes, reads("classes"));
  s.key("channels", m.channels, reads("channels"));
  s.key("path", m.path, reads("path"));
  s.closedChoice("loss", m.loss, lossChoices(), " (forward(inputs..., targets) returns the loss)", reads("loss"));
  s.key("inputs", m.inputs, reads("inputs"));
  s.key("targets", m.targets, reads("targets"));
  s.key("weights", m.weights, !m.weights.empty());
}

template <class S>
void dataKeys(S& s, Config& c) {
  s.choice("name", c.data.kind, dataChoices(), "data");
  const bool images = c.data.kind == DataKind::FashionMnist, tokens = c.data.kind == DataKind::Tokens;
  s.key("path", c.data.path, c.data.kind != DataKind::Synthetic);
  s.closedChoice("eval_split", c.data.evalSplit, evalSplitChoices(), "", images);
  s.key("eval_path", c.data.evalPath, tokens);
  s.closedChoice("token_dtype", c.data.tokenDtype, tokenDtypeChoices(), "", tokens);
}

template <class S>
void trainingKeys(S& s, Config& c) {
  auto& t = c.training;
  s.key("steps", t.steps);
  s.key("global_batch_size", t.globalBatchSize);
  s.key("micro_batch_size", t.microBatchSize);
  s.choice("nan_policy", t.nanPolicy, nanPolicyChoices(), "nan policy");
  s.choice("precision", t.precision, precisionChoices(), "precision");
  s.key("loss_scale", t.lossScale);
  s.key("loss_scale_window", t.lossScaleWindow);
  s.key("eval_interval", t.evalInterval);
  s.key("eval_samples", t.evalSamples);
}

template <class S>
void pipelineKeys(S& s, Config& c) {
  auto& p = c.pipeline;
  s.key("stages", p.stages);
  s.choice("schedule", p.schedule, [](const pipeline::ScheduleChoice& k) { return k.name(); }, parseScheduleSetting);
  s.key("chunks", p.chunks);
  s.key("fit_schedule", p.fitSchedule);
  s.key("microbatches", p.microbatches);
  s.key("data_parallel", p.dataParallel);
  s.key("cuts", p.cuts);
  s.choice("execution", p.execution, executionChoices(), "execution");
  s.choice("boundary_dtype", p.boundaryDtype, boundaryDtypeChoices(), "boundary dtype");
  s.key("plan", p.plan);
  s.key("profile", p.profile);
  s.section("partition", [&](auto& sub) {
    sub.choice("method", p.partitionMethod, partition::partitionMethods(), "partition method");
    sub.key("min_op_level_gain", p.minOpLevelGain);
  });
}

template <class S>
void memoryKeys(S& s, Config& c) {
  auto& m = c.memory;
  s.key("budget_mb", m.budgetMb);
  s.choice("policy", m.policy, memory::memoryPolicies(), "memory policy");
  s.key("swap", m.swap);
  s.key("swap_dir", m.swapDir);
  s.key("swap_window_mb", m.swapWindowMb);
  s.key("hard_limit", m.hardLimit);
}

template <class S>
void optimizerKeys(S& s, Config& c) {
  auto& o = c.optimizer;
  s.choice("name", o.name, optim::optimizerKinds(), "optimizer");
  s.key("lr", o.lr);
  s.key("beta1", o.beta1);
  s.key("beta2", o.beta2);
  s.key("eps", o.eps);
  s.key("weight_decay", o.weightDecay);
  s.key("clip_grad_norm", o.clipGradNorm);
  s.choice("schedule", o.schedule, optim::lrScheduleKinds(), "learning-rate schedule");
  s.key("warmup_steps", o.warmupSteps);
  s.key("min_lr", o.minLr);
  s.section("dist_adam", [&](auto& sub) {
    sub.choice("mode", o.distAdamMode, optim::distAdamModes(), "DistAdam mode");
    sub.key("bucket_mb", o.distAdamBucketMb);
  });
}

template <class S>
void loggingKeys(S& s, Config& c) {
  auto& l = c.logging;
  s.key("interval", l.interval);
  s.key("measure_memory", l.measureMemory);
  s.key("trace", l.trace);
  s.key("trace_steps", l.traceSteps);
  s.key("trace_ops", l.traceOps);
  s.key("tensorboard", l.tensorboard);
  s.choice("transfer_guard", l.transferGuard, transferGuardModeName, parseTransferGuardMode);
}

template <class S>
void checkpointKeys(S& s, Config& c) {
  s.key("dir", c.checkpoint.dir);
  s.key("interval", c.checkpoint.interval);
  s.key("keep_latest_k", c.checkpoint.keepLatestK);
  s.choice("resume", c.checkpoint.resume, resumeSettingName, parseResumeSetting);
}

template <class S>
void clusterKeys(S& s, Config& c) {
  auto& k = c.cluster;
  s.key("timeout_s", k.timeoutS);
  s.key("init_timeout_s", k.initTimeoutS);
  s.key("max_restarts", k.maxRestarts);
  s.key("hostfile", k.hostfile);
  s.closedChoice("launcher", k.launcher, launcherChoices(), "");
  s.key("interface", k.interface);
  s.key("rsh_agent", k.rshAgent);
  s.key("extra_mpirun_args", k.extraMpirunArgs);
  s.key("env", k.env);
  s.key("nodes", k.nodes);
  s.key("master_port", k.masterPort);
}

template <class V>
void visitKeys(V& root, Config& c) {
  root.section("job", [&](auto& s) { jobKeys(s, c); });
  root.section("model", [&](auto& s) { modelKeys(s, c); });
  root.section("data", [&](auto& s) { dataKeys(s, c); });
  root.section("training", [&](auto& s) { trainingKeys(s, c); });
  root.section("pipeline", [&](auto& s) { pipelineKeys(s, c); });
  root.section("memory", [&](auto& s) { memoryKeys(s, c); });
  root.section("optimizer", [&](auto& s) { optimizerKeys(s, c); });
  root.section("logging", [&](auto& s) { loggingKeys(s, c); });
  root.section("checkpoint", [&](auto& s) { checkpointKeys(s, c); });
  root.section("cluster", [&](auto& s) { clusterKeys(s, c); });
}

// The values' checks and derived defaults (ConfigValidate.cpp).
void validateConfig(Config& c);

}  // namespace sluice
