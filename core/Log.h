// Minimal logging: lines go to stderr (with a rank prefix once set) and, when a
// log file is open, to the per-rank log file too. Thread-safe.
#pragma once
#include <string>

namespace sluice::log {

enum class Level { Debug, Info, Warn, Error };

void setRank(int rank);
// With a host set, the prefix is "[rank R on HOST] " (jobs on several hosts).
void setHost(const std::string& host);
// Opens the per-rank log file (truncated, or appended to when resuming); lines
// logged afterwards go there too.
void openFile(const std::string& path, bool append = false);
void closeFile();
// Error naming the log file and the system's reason when a write to it
// failed since openFile (e.g. a full disk); lines are not lost silently.
void checkFile();
void setConsoleLevel(Level level);

void write(Level level, const std::string& message);
inline void info(const std::string& m) { write(Level::Info, m); }
inline void warn(const std::string& m) { write(Level::Warn, m); }
inline void error(const std::string& m) { write(Level::Error, m); }
inline void debug(const std::string& m) { write(Level::Debug, m); }

}  // namespace sluice::log
