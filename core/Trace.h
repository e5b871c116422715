// TraceRecorder: what a rank did and when, for the timeline trace
// (logging.trace; merged into trace.json by telemetry/Timeline.h).
//
// Streams (one row, a "thread", each in the trace viewer):
//   compute     forward and backward of each micro-batch (pipeline::StageWorker),
//               the optimizer step (Trainer); nested inside them, on the same
//               row but with their own category: recomputes ("recompute") and
//               the compute thread's stalls on swap I/O ("swap")
//   recv, send  waits for activations / gradients, posting sends
//   io          the swap engine's writes and reads (its own thread)
//   collective  the optimizer's waits on reduce-scatters and all-gathers
//   step        each traced step
//   ops, kernels, syncs (logging.trace_ops) LibTorch's profiler's host ops, and
//               on CUDA the kernels and the host's waits for the device
//               (core/DeviceTrace.h)
// Summaries count only category "compute" events with a micro-batch as busy
// time, so nested events are never counted twice.
//
// Times are this process's steady clock in microseconds; Timeline aligns
// ranks. Recording happens only while active (the traced steps). add() may be
// called from any thread: an event started on another thread (swap I/O) takes
// the step it was started in from current(), so it is kept even when the step
// has ended by the time it is added.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sluice {

struct TraceEvent {
  std::string name;      // e.g. "F3", "B3", "recv activation 3", "optimizer", "step 2"
  std::string stream;    // compute | recv | send | io | collective | step
  std::string category;  // = stream, or recompute | swap for events nested in compute
  int64_t step = 0;
  int microBatch = -1;  // -1: not a micro-batch's
  double startUs = 0, durUs = 0;
};

class TraceRecorder {
 public:
  static double nowUs();

  struct Mark {
    int64_t step = 0;
    bool active = false;
    double startUs = 0;
  };

  void setStep(int64_t step, bool active) {
    std::lock_guard<std::mutex> lock(mutex_);
    step_ = step;
    active_ = active;
  }
  bool active() const { return active_; }
  // The current step and whether it is traced, with the time now.
  Mark current() const;

  // An event of the current step that ends now-ish (endUs).
  void add(const std::string& name, const std::string& stream, int microBatch, double startUs, double endUs,
           const std::string& category = "");
  // An event of the step of `mark` (taken at its start), ending now.
  void add(const Mark& mark, const std::string& name, const std::string& stream, int microBatch,
           const std::string& category = "");

  // Events made elsewhere (core/DeviceTrace.h), kept whatever the current step.
  void addEvents(std::vector<TraceEvent> events);

  // Copy of the events so far (safe while other threads add).
  std::vector<TraceEvent> events() const;

 private:
  mutable std::mutex mutex_;
  int64_t step_ = 0;
  std::atomic<bool> active_{false};
  std::vector<TraceEvent> events_;
};

}  // namespace sluice
