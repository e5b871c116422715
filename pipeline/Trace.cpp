#include "pipeline/Trace.h"

#include <chrono>

namespace sluice::pipeline {

double TraceRecorder::nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace sluice::pipeline
