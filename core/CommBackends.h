// core::CommBackends: the tables a Communicator finds its backends in.
//
// Host backends (core/CommBackend.h, HostBackend): one row each, by name;
// Communicator::world(name) and self() build on the row's world and self.
// "mpi" (core/MpiBackend.h) is the built-in row and the default; a test adds
// its own with addHostBackendKind (tests/core/RecordingBackendTest.cpp).
//
// Device backends: deviceBackendFactory(kind) is a CUDA seam (as
// core/CudaRuntime.h describes): NCCL's factory where the build has CUDA
// (core/NcclBackend.cpp), none where it does not (core/NoCuda.cpp); CMake
// picks the file, so no `#if SLUICE_CUDA` is needed above it.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "core/CommBackend.h"

namespace sluice {

struct HostBackendKind {
  std::string name;
  std::string summary;
  std::shared_ptr<HostBackend> (*world)();  // every rank of the job
  std::shared_ptr<HostBackend> (*self)();   // this rank alone
};

const std::deque<HostBackendKind>& hostBackendKinds();
// CommError naming the rows when there is none of that name.
const HostBackendKind& hostBackendKind(const std::string& name);
// Adds a row (a test's backend); CommError when the name is taken. Returns true.
bool addHostBackendKind(HostBackendKind kind);

// The factory of `kind` in this build, or nullptr when it has none (NCCL
// without CUDA). Mpi has none: CUDA tensors stay on the host backend.
DeviceBackendFactory deviceBackendFactory(CommBackendKind kind);

}  // namespace sluice
