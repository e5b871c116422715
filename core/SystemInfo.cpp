#include "core/SystemInfo.h"

#include <dlfcn.h>
#include <mpi.h>
#include <torch/types.h>
#include <torch/version.h>

#include <climits>
#include <cstdlib>
#include <thread>

namespace sluice {

std::string loadedBlas() {
  // A matrix product first, so that LibTorch has loaded its BLAS.
  auto a = torch::ones({8, 8});
  (void)torch::mm(a, a);
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  if (!sym) return "none (sgemm_ not found)";
  Dl_info info;
  if (!dladdr(sym, &info) || !info.dli_fname) return "unknown";
  char resolved[PATH_MAX];
  if (realpath(info.dli_fname, resolved)) return resolved;
  return info.dli_fname;
}

std::string blasKind() {
  std::string path = loadedBlas();
  if (path.find("openblas") != std::string::npos) {
    if (path.find("openmp") != std::string::npos) return "OpenBLAS (openmp)";
    if (path.find("pthread") != std::string::npos) return "OpenBLAS (pthread)";
    return "OpenBLAS";
  }
  if (path.find("mkl") != std::string::npos) return "MKL";
  if (path.find("blis") != std::string::npos) return "BLIS";
  if (path.find("/blas/") != std::string::npos) return "reference BLAS (slow: install libopenblas0-openmp)";
  // PyPI's LibTorch links its BLAS in (MKL on x86-64) and adds oneDNN.
  if (path.find("libtorch_cpu") != std::string::npos) {
    return std::string(at::hasMKL() ? "MKL" : "LibTorch's own BLAS") + " (linked into LibTorch)" +
           (at::hasMKLDNN() ? " + oneDNN" : "");
  }
  return path;
}

std::string torchVersion() { return TORCH_VERSION; }

std::string mpiLibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, len);
  auto nl = s.find_first_of(",\n");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

int hardwareCores() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

bool hostOversubscribed() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local && oversubscribed(std::atoi(local), hardwareCores());
}

bool oversubscribed(int ranksOnHost, int cores) { return ranksOnHost > cores; }

}  // namespace sluice
