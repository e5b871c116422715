// core::ExecMode: how a stage runs its graph (pipeline.execution), parsed once
// by the config (torch-free, as Config.h is); core/StageModule.h runs it.
#pragma once

namespace sluice {

// Eager: node by node through the TorchScript interpreter (what the profiler
// measures); Compiled: a torch::jit::GraphFunction per input signature;
// Graphs (CUDA): each micro-batch slot's forward and backward captured into
// CUDA graphs on first use, eager node by node, and replayed after
// (pipeline/StageGraphs.h).
enum class ExecMode { Compiled, Eager, Graphs };

}  // namespace sluice
