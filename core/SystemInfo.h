// Facts about the machine and libraries, for --version, logs and benchmarks.
#pragma once
#include <string>

namespace sluice {

// Path of the shared library that provides sgemm_ (after resolving the
// Debian alternatives symlink), e.g. ".../openblas-openmp/libblas.so.3".
std::string loadedBlas();
// "OpenBLAS (openmp)", "reference BLAS", ... derived from loadedBlas().
std::string blasKind();
std::string torchVersion();
std::string mpiLibraryVersion();  // first line of MPI_Get_library_version
int hardwareCores();

}  // namespace sluice
