// core::CommBackendKind: which library carries a communicator's CUDA tensors
// (job.backend), parsed once by the config (torch-free, as Config.h is).
// CPU tensors always go over MPI. The backends: core/CommBackend.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/Choice.h"

namespace sluice {

enum class CommBackendKind { Mpi, Nccl };

// The backends a job can choose for its CUDA tensors (job.backend), one row
// each (core/Choice.h); defined in core/Communicator.cpp.
const std::vector<Choice<CommBackendKind>>& commBackendKinds();
const char* commBackendName(CommBackendKind kind);
// Throws ConfigError listing the names.
CommBackendKind parseCommBackend(const std::string& name);
// True when this build can create `kind` (NCCL needs a CUDA build).
bool commBackendBuilt(CommBackendKind kind);
// The backend for a job's CUDA tensors: `requested`, or with nullopt (auto)
// NCCL when the build has it and no GPU is shared by two ranks, else MPI.
// Throws ConfigError when NCCL is requested and cannot work (no CUDA build,
// or gpusShared: more ranks on some host than it has GPUs).
CommBackendKind chooseDeviceBackend(std::optional<CommBackendKind> requested, bool gpusShared);

}  // namespace sluice
