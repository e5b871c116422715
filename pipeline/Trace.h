// pipeline::TraceRecorder: what a rank did and when, for the timeline trace
// (logging.trace; merged into trace.json by launcher/Timeline.h).
//
// One event per schedule action (forward and backward of each micro-batch
// on the "compute" stream, waits for activations and gradients on "recv",
// posting sends on "send"), plus what the trainer adds (the optimizer step on
// "compute", each traced step on "step"). Times are this process's steady
// clock in microseconds; Timeline aligns ranks. Recording happens only while
// active (the traced steps), from the training thread; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::pipeline {

struct TraceEvent {
  std::string name;    // e.g. "F3", "B3", "recv activation 3", "optimizer", "step 2"
  std::string stream;  // compute | recv | send | step
  int64_t step = 0;
  int microBatch = -1;  // -1: not a micro-batch's
  double startUs = 0, durUs = 0;
};

class TraceRecorder {
 public:
  static double nowUs();

  void setStep(int64_t step, bool active) {
    step_ = step;
    active_ = active;
  }
  bool active() const { return active_; }
  void add(const std::string& name, const std::string& stream, int microBatch, double startUs, double endUs) {
    if (active_) events_.push_back({name, stream, step_, microBatch, startUs, endUs - startUs});
  }
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  int64_t step_ = 0;
  bool active_ = false;
  std::vector<TraceEvent> events_;
};

}  // namespace sluice::pipeline
