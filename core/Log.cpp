#include "core/Log.h"

#include "core/Error.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>

namespace sluice::log {
namespace {
std::mutex mutex;
int rank = -1;
std::string host;
Level consoleLevel = Level::Info;
std::ofstream file;
std::string filePath;
int fileError = 0;  // errno of the first failed write to the file

const char* levelName(Level level) {
  switch (level) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warning";
    case Level::Error: return "error";
  }
  return "";
}
}  // namespace

void setRank(int r) {
  std::lock_guard<std::mutex> lock(mutex);
  rank = r;
}

void setHost(const std::string& h) {
  std::lock_guard<std::mutex> lock(mutex);
  host = h;
}

void openFile(const std::string& path, bool append) {
  std::lock_guard<std::mutex> lock(mutex);
  file.close();
  file.open(path, append ? std::ios::app : std::ios::trunc);
  filePath = path;
  fileError = file.is_open() ? 0 : errno;
}

void checkFile() {
  std::lock_guard<std::mutex> lock(mutex);
  SLUICE_CHECK(fileError == 0, Error,
               "writing log file " << filePath << " failed: " << std::strerror(fileError)
                                   << " (lines after that are missing there); free space there, then resume");
}

void closeFile() {
  std::lock_guard<std::mutex> lock(mutex);
  file.close();
}

void setConsoleLevel(Level level) {
  std::lock_guard<std::mutex> lock(mutex);
  consoleLevel = level;
}

void write(Level level, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex);
  std::string prefix = rank >= 0 ? "[rank " + std::to_string(rank) + (host.empty() ? "" : " on " + host) + "] " : "";
  std::string line = prefix + (level == Level::Info ? "" : std::string(levelName(level)) + ": ") + message;
  // One write per line: a rank's lines must not interleave with another's
  // (mpirun merges the ranks' stderr by write, not by line).
  if (level >= consoleLevel) {
    const std::string out = line + "\n";
    std::cerr.write(out.data(), static_cast<std::streamsize>(out.size()));
    std::cerr.flush();
  }
  if (file.is_open() && fileError == 0) {
    file << line << std::endl;
    if (!file.good()) fileError = errno ? errno : EIO;
  }
}

}  // namespace sluice::log
