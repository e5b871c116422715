// core::ExecMode: how a stage runs its graph (pipeline.execution), parsed once
// by the config (torch-free, as Config.h is); core/StageModule.h runs it.
#pragma once

namespace sluice {

// Eager: node by node through the TorchScript interpreter (what the profiler
// measures); Compiled: a torch::jit::GraphFunction per input signature.
enum class ExecMode { Compiled, Eager };

}  // namespace sluice
