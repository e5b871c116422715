#include "core/Files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/Error.h"

namespace sluice {

namespace {

// Writes `bytes` to a new file `tmp`, fsynced when `durable`; on any failure
// removes it and throws Error with the system's reason.
void writeTemp(const std::string& tmp, const std::string& bytes, bool durable) {
  UniqueFd fd(::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644));
  SLUICE_CHECK(fd.valid(), Error, "cannot write " << tmp << ": " << std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n == 0 ? ENOSPC : errno;
      fd.reset();
      std::remove(tmp.c_str());
      throw Error("writing " + tmp + " failed: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = !durable || ::fsync(fd.get()) == 0;
  const int syncErr = errno;
  const bool closed = ::close(fd.release()) == 0;  // NFS and some file systems report write errors only here
  if (!synced || !closed) {
    const int err = !synced ? syncErr : errno;
    std::remove(tmp.c_str());
    throw Error("writing " + tmp + " failed: " + std::strerror(err));
  }
}

void commit(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
}

}  // namespace

void writeFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  writeTemp(tmp, bytes, /*durable=*/false);
  commit(tmp, path);
}

void writeFileDurably(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  writeTemp(tmp, bytes, /*durable=*/true);
  commit(tmp, path);
  auto dir = std::filesystem::path(path).parent_path();
  UniqueFd dfd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY));
  if (dfd.valid()) ::fsync(dfd.get());
}

void requireRegularFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  SLUICE_CHECK(std::filesystem::exists(st), ConfigError, what << " '" << path << "' does not exist");
  SLUICE_CHECK(!std::filesystem::is_directory(st), ConfigError, what << " '" << path << "' is a directory, not a file");
  SLUICE_CHECK(std::filesystem::is_regular_file(st), ConfigError,
               what << " '" << path << "' is not a regular file (a FIFO, socket or device would block or change "
                                       "under the reader); give a file");
  SLUICE_CHECK(::access(path.c_str(), R_OK) == 0, ConfigError,
               what << " '" << path << "' cannot be read: " << std::strerror(errno));
}

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SLUICE_CHECK(f, Error, "cannot read " << path << ": " << std::strerror(errno));
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string checksum(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

}  // namespace sluice
