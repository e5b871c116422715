#include "core/CommBackends.h"

#include "core/Error.h"
#include "core/MpiBackend.h"

namespace sluice {
namespace {

std::deque<HostBackendKind>& table() {
  static std::deque<HostBackendKind> rows = {
      {"mpi", "Open MPI: CPU tensors, CUDA tensors through host staging",
       [] { return std::shared_ptr<HostBackend>(MpiBackend::world()); },
       [] { return std::shared_ptr<HostBackend>(MpiBackend::self()); }}};
  return rows;
}

}  // namespace

const std::deque<HostBackendKind>& hostBackendKinds() { return table(); }

const HostBackendKind& hostBackendKind(const std::string& name) {
  std::string names;
  for (const auto& row : table()) {
    if (row.name == name) return row;
    names += (names.empty() ? "" : ", ") + row.name;
  }
  throw CommError("no host communication backend '" + name + "' (there are: " + names + ")");
}

bool addHostBackendKind(HostBackendKind kind) {
  for (const auto& row : table()) {
    SLUICE_CHECK(row.name != kind.name, CommError, "host backend '" << kind.name << "' is in the table already");
  }
  SLUICE_CHECK(kind.world && kind.self, CommError, "host backend '" << kind.name << "' needs its world and self");
  table().push_back(std::move(kind));
  return true;
}

}  // namespace sluice
