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
// True when more ranks of this job run on this host (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE) than it has cores: then a rank that spins takes
// a core from one that computes (tests oversubscribe; real jobs should not).
bool hostOversubscribed();
// The same test for ranksOnHost ranks on a host of `cores` cores (`sluice
// simulate --cores`).
bool oversubscribed(int ranksOnHost, int cores);

}  // namespace sluice
