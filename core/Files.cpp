#include "core/Files.h"

#include <cstdio>
#include <fstream>

#include "core/Error.h"

namespace sluice {

void writeFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    SLUICE_CHECK(f, Error, "cannot write " << tmp);
    f << bytes;
    SLUICE_CHECK(f.good(), Error, "writing " << tmp << " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path);
  }
}

}  // namespace sluice
