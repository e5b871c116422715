#include "core/Trace.h"

#include <chrono>
#include <iterator>

namespace sluice {

double TraceRecorder::nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TraceRecorder::Mark TraceRecorder::current() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {step_, active_, nowUs()};
}

void TraceRecorder::add(const std::string& name, const std::string& stream, int microBatch, double startUs,
                        double endUs, const std::string& category) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, stream, category.empty() ? stream : category, step_, microBatch, startUs, endUs - startUs});
}

void TraceRecorder::add(const Mark& mark, const std::string& name, const std::string& stream, int microBatch,
                        const std::string& category) {
  if (!mark.active) return;
  const double end = nowUs();
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(
      {name, stream, category.empty() ? stream : category, mark.step, microBatch, mark.startUs, end - mark.startUs});
}

void TraceRecorder::addEvents(std::vector<TraceEvent> events) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.insert(events_.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

}  // namespace sluice
