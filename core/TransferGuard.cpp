#include "core/TransferGuard.h"

#include <ATen/record_function.h>
#include <torch/types.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>

#include "core/CommActivity.h"
#include "core/Bytes.h"
#include "core/Log.h"

namespace sluice {
namespace {

thread_local std::vector<TransferScope::Kind> scopes;

const char* kScopeNames[TransferScope::kKinds] = {"compute", "data", "comm", "swap", "log read", "setup"};

std::string describe(const TransferEvent& e) {
  return std::string(directionName(e.direction)) + " copy of " + formatBytes(e.bytes) +
         (e.context.empty() ? "" : " (" + e.context + ")");
}

struct Guard {
  std::mutex mutex;
  TransferGuardMode mode = TransferGuardMode::Warn;
  RoundTripDetector detector;
  TransferCounts counts;
  std::optional<std::string> stepRoundTrip;  // the step's first, for Error
  std::set<std::string> warned;              // each distinct report once
};

Guard& guard() {
  static auto* g = new Guard();  // used from the hook until the process ends
  return *g;
}

std::atomic<bool> hookOn{false};

// The dispatcher hook: only copies between a CPU and a CUDA tensor, and scalar reads of CUDA tensors.
std::unique_ptr<at::ObserverContext> onOperator(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (!name) return nullptr;
  const bool copy = std::strcmp(name, "aten::copy_") == 0;
  const bool item = !copy && std::strcmp(name, "aten::_local_scalar_dense") == 0;
  if (!copy && !item) return nullptr;
  const auto inputs = fn.inputs();
  TransferEvent e;
  if (copy) {
    if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return nullptr;
    const auto& dst = inputs[0].toTensor();
    const auto& src = inputs[1].toTensor();
    const bool toDevice = src.is_cpu() && dst.is_cuda(), toHost = src.is_cuda() && dst.is_cpu();
    if (!toDevice && !toHost) return nullptr;
    e.direction = toDevice ? TransferDirection::HostToDevice : TransferDirection::DeviceToHost;
    e.bytes = static_cast<int64_t>(src.nbytes());
    e.numel = src.numel();
  } else {
    if (inputs.empty() || !inputs[0].isTensor() || !inputs[0].toTensor().is_cuda()) return nullptr;
    e.direction = TransferDirection::DeviceToHost;
    e.bytes = static_cast<int64_t>(inputs[0].toTensor().element_size());
    e.numel = 1;
  }
  e.scope = TransferScope::current();
  e.context = CommActivity::current();
  transfers::record(e);
  return nullptr;
}

}  // namespace

const char* directionName(TransferDirection d) {
  return d == TransferDirection::HostToDevice ? "host->device" : "device->host";
}

TransferScope::TransferScope(Kind kind) { scopes.push_back(kind); }
TransferScope::~TransferScope() { scopes.pop_back(); }
TransferScope::Kind TransferScope::current() { return scopes.empty() ? Kind::Compute : scopes.back(); }
const char* TransferScope::name(Kind kind) { return kScopeNames[static_cast<int>(kind)]; }

void RoundTripDetector::beginStep() {
  inStep_ = true;
  firstLeg_[0].reset();
  firstLeg_[1].reset();
}

std::optional<std::string> RoundTripDetector::observe(const TransferEvent& e) {
  // Start-up and the end of the run (outside steps), copies Sluice makes on
  // purpose, log reads and scalars are exempt (Note [round trip]).
  if (!inStep_ || TransferScope::exempt(e.scope) || e.numel <= 1) return std::nullopt;
  const int d = static_cast<int>(e.direction), back = 1 - d;
  if (firstLeg_[back]) {
    return "round trip inside a training step: a " + describe(*firstLeg_[back]) + ", then a " + describe(e) +
           ": the device waits for the host in between; keep this computation on one device";
  }
  if (!firstLeg_[d]) firstLeg_[d] = e;
  return std::nullopt;
}

const std::vector<Choice<TransferGuardMode>> kModes = {
    {TransferGuardMode::Off, "off", "count copies only"},
    {TransferGuardMode::Warn, "warn", "log each round trip once per pair of places"},
    {TransferGuardMode::Error, "error", "a round trip stops the job before the update"},
};

TransferGuardMode parseTransferGuardMode(const std::string& name) {
  return parseChoice(kModes, name, "transfer guard mode");
}

const char* transferGuardModeName(TransferGuardMode mode) { return choiceName(kModes, mode); }

namespace transfers {

void setMode(TransferGuardMode mode) {
  std::lock_guard<std::mutex> lock(guard().mutex);
  guard().mode = mode;
}

TransferGuardMode mode() {
  std::lock_guard<std::mutex> lock(guard().mutex);
  return guard().mode;
}

void record(const TransferEvent& e) {
  auto& g = guard();
  std::lock_guard<std::mutex> lock(g.mutex);
  const int d = static_cast<int>(e.direction);
  g.counts.copies[d] += 1;
  g.counts.bytes[d] += e.bytes;
  g.counts.copiesByScope[static_cast<int>(e.scope)] += 1;
  auto report = g.detector.observe(e);
  if (!report) return;
  g.counts.roundTrips += 1;
  if (!g.stepRoundTrip) g.stepRoundTrip = report;
  if (g.mode == TransferGuardMode::Warn && g.warned.insert(*report).second) log::warn(*report);
}

void beginStep() {
  auto& g = guard();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.detector.beginStep();
  g.stepRoundTrip.reset();
}

void endStep() {
  auto& g = guard();
  std::unique_lock<std::mutex> lock(g.mutex);
  RoundTripDetector idle;
  g.detector = idle;  // outside a step: nothing counts as a leg
  auto found = std::move(g.stepRoundTrip);
  g.stepRoundTrip.reset();
  const bool raise = g.mode == TransferGuardMode::Error && found;
  lock.unlock();
  if (raise) throw TransferError(*found + " (logging.transfer_guard: error; set warn to go on)");
}

TransferCounts counts() {
  std::lock_guard<std::mutex> lock(guard().mutex);
  return guard().counts;
}

void installHook() {
  bool expected = false;
  if (!hookOn.compare_exchange_strong(expected, true)) return;
  at::addGlobalCallback(at::RecordFunctionCallback(&onOperator).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
}

bool hookInstalled() { return hookOn.load(); }

}  // namespace transfers
}  // namespace sluice
