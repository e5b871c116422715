#include "core/HeapPolicy.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace sluice {

bool keepFreedMemoryInHeap() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return false;  // the user's settings win
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit (half its heap size).
  const bool mmap = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap && trim;
}

}  // namespace sluice
