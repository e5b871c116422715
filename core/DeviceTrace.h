// core::DeviceTrace: LibTorch's profiler (Kineto) around a traced step, so
// the timeline shows, under Sluice's own action events (core/Trace.h), the
// ops each action ran and, on CUDA, the kernels with their device times
// (logging.trace_ops, on by default with logging.trace).
//
// Contract:
//   - start() before a traced step and stop() after it, on the thread that
//     runs the step. Ops run by threads that inherit the profiler's state
//     (autograd's device threads) are recorded too.
//   - stop() adds the step's events to the TraceRecorder, shifted from the
//     profiler's clock (CLOCK_REALTIME) onto the recorder's steady clock:
//       stream "ops"        host ops of the stepping thread (category "op");
//                           other threads' ops on "ops (thread k)";
//       stream "kernels"    CUDA kernels, copies and fills (categories "kernel",
//                           "memcpy", "memset") with their device times;
//       stream "syncs"      host calls that wait for the device
//                           (cudaStreamSynchronize, cudaDeviceSynchronize,
//                           cudaEventSynchronize, blocking cudaMemcpy).
//     Launch calls are not kept (thousands per step); they give the lead.
//   - stop() returns the step's summary (DeviceStepSummary): counts, the
//     kernels' busy time, the syncs, how far the host ran ahead of the device
//     (per kernel, its start minus its launch call's start), and the top
//     ops by self time or kernels by device time.
// One DeviceTrace per process; the profiler is process-wide state, so two
// must never be active at once (start() refuses).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/Trace.h"

namespace sluice {

struct DeviceStepSummary {
  int64_t step = 0;
  double stepUs = 0;       // the first to the last recorded event
  int64_t ops = 0;         // host ops (every nesting level)
  int64_t kernels = 0;     // kernels, copies and fills on the device
  double kernelBusyUs = 0;  // union of their intervals
  int64_t syncs = 0;       // host calls that waited for the device
  double leadMedianUs = 0, leadMaxUs = 0;  // host ahead of device, per kernel (0 without kernels)
  std::vector<std::pair<std::string, double>> topOps;      // by self time (us), most first
  std::vector<std::pair<std::string, double>> topKernels;  // by device time (us), most first
};

// The line the trainer logs for a step's summary.
std::string describe(const DeviceStepSummary& s);

class DeviceTrace {
 public:
  explicit DeviceTrace(bool cuda) : cuda_(cuda) {}
  DeviceTrace(const DeviceTrace&) = delete;
  DeviceTrace& operator=(const DeviceTrace&) = delete;
  ~DeviceTrace();

  void start();
  DeviceStepSummary stop(TraceRecorder& trace, int64_t step);
  bool active() const { return active_; }

 private:
  bool cuda_;
  bool active_ = false;
  double steadyMinusRealUs_ = 0;  // measured at start()
};

}  // namespace sluice
