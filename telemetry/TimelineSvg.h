// telemetry::TimelineSvg: `sluice trace show trace.json -o timeline.svg`, a
// self-contained picture of a trace (telemetry/Timeline.h) without tools.
//
// One row per rank (labelled with its process name), time left to right
// over the traced steps: forwards and backwards as blocks coloured by
// micro-batch (forward light, backward dark, labelled F3 / B3 where they fit),
// the optimizer step grey, waits for activations and gradients hatched under
// the blocks, step starts as thin lines, a millisecond axis. The title gives
// the ranks, steps, mean step time and the measured bubble (as in the run's
// timeline summary: pipeline window from a step's start to its last forward
// or backward on any rank). A file that is not a trace is a ConfigError.
#pragma once

#include <string>

namespace sluice {

struct SvgSize {
  int width = 0, height = 0;
};

// The SVG text; `size` (optional) receives its pixel size.
std::string timelineSvg(const std::string& tracePath, SvgSize* size = nullptr);

}  // namespace sluice
