// core::TransferGuard: every copy between host and device, counted where it
// happens, and the round-trip rule that tells a user when the training step
// bounces data between them.
//
// Counting. transfers::installHook() adds a LibTorch RecordFunction callback: the
// dispatcher calls it for every operator, and it takes aten::copy_ (which
// .to(), .cpu(), .cuda(), copy_ and the communicator's staging all end in)
// between a CPU and a CUDA tensor, and aten::_local_scalar_dense (.item()) of
// a CUDA tensor. Sluice installs it on CUDA jobs only (on CPU there is
// nothing to see, and RecordFunction callbacks cost every operator a little).
// Each copy is recorded with the kind of the innermost TransferScope active
// on its thread: Data (a micro-batch's inputs going to the device), Comm
// (the communicator's host staging and NCCL headers), Swap (the swap tier),
// LogRead (metrics read at a log point), Setup (start-up, checkpoints, the
// end of the run); no scope: the step's own computation ("compute").
//
// Note [round trip] (from the implicit-copy proposal, seeds/001): what hurts
// is data that leaves the device it is computed on and comes back inside a
// step (device -> host -> device, or host -> device -> host): the device
// waits for the host in the middle. Start-up and the end of the run,
// log-point reads, scalars (one element) and the copies Sluice makes on
// purpose (Data, Comm, Swap) are exempt. Inside a step (beginStep/endStep),
// an unexempt copy one way followed by an unexempt copy the other way is a
// round trip; the report names both copies and what the thread was doing
// (CommActivity).
//
// Modes (logging.transfer_guard): off (the trainer installs no hook: nothing
// is counted and no op pays for it), warn (log each round
// trip once per distinct pair of places), error (endStep throws
// TransferError naming it: the step's work is done, nothing half-applied is
// left: the trainer calls it before the optimizer update).
// Thread-safe (one mutex; copies are rare events).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/Choice.h"
#include "core/Error.h"

namespace sluice {

enum class TransferDirection { HostToDevice = 0, DeviceToHost = 1 };
const char* directionName(TransferDirection d);  // "host->device" | "device->host"

class TransferScope {
 public:
  enum class Kind { Compute = 0, Data, Comm, Swap, LogRead, Setup };
  static constexpr int kKinds = 6;
  explicit TransferScope(Kind kind);
  ~TransferScope();
  TransferScope(const TransferScope&) = delete;
  TransferScope& operator=(const TransferScope&) = delete;
  // The innermost scope of this thread (Compute when none).
  static Kind current();
  static const char* name(Kind kind);
  // Kinds whose copies never count toward a round trip.
  static bool exempt(Kind kind) { return kind != Kind::Compute; }
};

struct TransferEvent {
  TransferDirection direction = TransferDirection::HostToDevice;
  int64_t bytes = 0;
  int64_t numel = 0;
  TransferScope::Kind scope = TransferScope::Kind::Compute;
  std::string context;  // CommActivity::current() when recorded
};

// The round-trip rule over one step's copies, as pure logic (unit-tested from
// recorded sequences).
class RoundTripDetector {
 public:
  void beginStep();
  // The report when this copy completes a round trip inside the step, else nothing.
  std::optional<std::string> observe(const TransferEvent& e);
  bool inStep() const { return inStep_; }

 private:
  bool inStep_ = false;
  std::optional<TransferEvent> firstLeg_[2];  // the first unexempt copy of the step, per direction
};

class TransferError : public Error {
 public:
  using Error::Error;
};

enum class TransferGuardMode { Off, Warn, Error };
// Throws ConfigError listing the names (off | warn | error).
TransferGuardMode parseTransferGuardMode(const std::string& name);
const char* transferGuardModeName(TransferGuardMode mode);

struct TransferCounts {
  int64_t copies[2] = {0, 0};  // by TransferDirection
  int64_t bytes[2] = {0, 0};
  int64_t copiesByScope[TransferScope::kKinds] = {};
  int64_t roundTrips = 0;
};

// The process-wide guard the hook feeds.
namespace transfers {
void setMode(TransferGuardMode mode);
TransferGuardMode mode();
// Records one copy (the hook calls it; tests may too).
void record(const TransferEvent& e);
void beginStep();
// Ends the step; under Error throws TransferError for the step's first round trip.
void endStep();
TransferCounts counts();  // since the start of the process
// Adds the RecordFunction callback once per process (idempotent).
void installHook();
bool hookInstalled();
}  // namespace transfers

}  // namespace sluice
