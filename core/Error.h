// Errors thrown by Sluice libraries. Library code never exits; the CLI turns
// an Error into a message and a non-zero exit code.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace sluice {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad YAML, unknown keys, degrees that do not divide. The message names the key.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A failed MPI call or a p2p message whose metadata does not match.
class CommError : public Error {
 public:
  using Error::Error;
};

// Capture, split or execution of an op graph.
class GraphError : public Error {
 public:
  using Error::Error;
};

// An invalid pipeline schedule (the checker names the action at fault).
class ScheduleError : public Error {
 public:
  using Error::Error;
};

// Data files missing, empty or too small for the requested windows.
class DataError : public Error {
 public:
  using Error::Error;
};

// A plan that cannot be made (no plan fits the budget) or used (another
// model, truncated file, stage count that differs from the config).
class PlanError : public Error {
 public:
  using Error::Error;
};

// Memory plans at run time: a swap tier that is missing, on tmpfs or full; a
// saved tensor modified in place after it was saved; an allocation over the
// stage's hard limit.
class MemoryError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be used: missing, incomplete, truncated or
// corrupted (checksum), or made for another model.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// Optimizer misuse (mismatched parameters, step without gradients, ...).
class OptimError : public Error {
 public:
  using Error::Error;
};

}  // namespace sluice

// SLUICE_CHECK(cond, ErrorType, stream-expression): throws ErrorType with the
// message built from the stream expression when cond is false.
#define SLUICE_CHECK(cond, ErrorType, msg)          \
  do {                                              \
    if (!(cond)) {                                  \
      std::ostringstream sluice_check_oss_;         \
      sluice_check_oss_ << msg;                     \
      throw ErrorType(sluice_check_oss_.str());     \
    }                                               \
  } while (0)
