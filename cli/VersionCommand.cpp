// `sluice --version`: Sluice, LibTorch, MPI, BLAS, CUDA and cores in use.
#include "cli/Commands.h"

#include <iostream>

#include "core/Device.h"
#include "core/SystemInfo.h"

namespace sluice::cli {

int versionCommand(const CommandLine&, int, char**) {
  std::cout << "sluice " << SLUICE_VERSION << "\n"
            << "LibTorch " << sluice::torchVersion() << "\n"
            << sluice::mpiLibraryVersion() << "\n"
            << "BLAS: " << sluice::blasKind() << " (" << sluice::loadedBlas() << ")\n"
            << "CUDA: " << sluice::cudaBuildText() << "; "
            << (sluice::cudaDevices() > 0 ? std::to_string(sluice::cudaDevices()) + " device(s)"
                                           : "no device (" + sluice::cudaAbsentReason() + ")")
            << "\n"
            << "cores: " << sluice::hardwareCores() << "\n";
  return 0;
}

}  // namespace sluice::cli
