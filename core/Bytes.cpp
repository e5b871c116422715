#include "core/Bytes.h"

#include <cstdio>

namespace sluice {

std::string formatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes < 0 ? -bytes : bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%s%.0f %s" : "%s%.2f %s", bytes < 0 ? "-" : "", v, units[u]);
  return buf;
}

std::string formatBytesExact(int64_t bytes) { return formatBytes(bytes) + " (" + std::to_string(bytes) + " bytes)"; }

}  // namespace sluice
