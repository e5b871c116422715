#include "telemetry/TimelineSvg.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "core/Error.h"
#include "core/Files.h"

namespace sluice {
namespace {

struct Block {
  std::string name, cat;
  int pid = 0, microBatch = -1;
  int64_t step = 0;
  double ts = 0, dur = 0;
};

constexpr int kWidth = 1200, kLeft = 160, kRight = 20, kTop = 56, kRow = 40, kBottom = 40;

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else out += ch;
  }
  return out;
}

std::string colour(int microBatch, bool backward) {
  const int hue = (microBatch * 47) % 360;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "hsl(%d,70%%,%d%%)", hue, backward ? 38 : 62);
  return buf;
}

}  // namespace

namespace {

struct Trace {
  std::map<int, std::string> process;  // pid -> name
  std::vector<Block> blocks;
};

Trace readTrace(const std::string& tracePath) {
  requireRegularFile(tracePath, "trace show: the trace");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(readFile(tracePath));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("trace show: cannot read " + tracePath + " as a trace (" + e.what() + ")");
  }
  SLUICE_CHECK(root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array(), ConfigError,
               "trace show: " << tracePath << " is not a trace (no traceEvents list; write one with sluice train --trace)");
  Trace trace;
  auto& process = trace.process;
  auto& blocks = trace.blocks;
  try {
    for (const auto& e : root["traceEvents"]) {
      const std::string ph = e.value("ph", "");
      const int pid = e.value("pid", 0);
      if (ph == "M" && e.value("name", "") == "process_name") process[pid] = e.at("args").at("name").get<std::string>();
      if (ph != "X") continue;
      Block b;
      b.name = e.at("name").get<std::string>();
      b.cat = e.value("cat", "");
      b.pid = pid;
      b.ts = e.at("ts").get<double>();
      b.dur = e.at("dur").get<double>();
      const auto args = e.value("args", nlohmann::json::object());
      b.step = args.value("step", int64_t{0});
      b.microBatch = args.value("micro_batch", -1);
      blocks.push_back(b);
      if (!process.count(pid)) process[pid] = "rank " + std::to_string(pid);
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("trace show: " + tracePath + " has an event that is not a trace event (" + e.what() + ")");
  }
  SLUICE_CHECK(!blocks.empty(), ConfigError, "trace show: " << tracePath << " has no events");
  return trace;
}

// What the title says, and where the drawing's time axis starts and ends.
struct TraceSummary {
  double t0 = 0, t1 = 0, bubble = 0, meanStepMs = 0;
  std::string steps;
};

TraceSummary summarize(const Trace& trace) {
  const auto& blocks = trace.blocks;
  TraceSummary out;
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  for (const auto& b : blocks) {
    t0 = std::min(t0, b.ts);
    t1 = std::max(t1, b.ts + b.dur);
  }
  // Measured: per step, the window from its first start to its last forward/backward end; busy per rank.
  std::map<int64_t, std::pair<double, double>> window;  // step -> (start, end)
  std::map<int64_t, double> stepTime;                    // step -> longest step span
  double busy = 0;
  for (const auto& b : blocks) {
    auto& w = window.try_emplace(b.step, std::numeric_limits<double>::infinity(), 0.0).first->second;
    if (b.cat == "step") {
      w.first = std::min(w.first, b.ts);
      stepTime[b.step] = std::max(stepTime[b.step], b.dur);
    }
    if (b.cat == "compute" && b.microBatch >= 0) {
      w.second = std::max(w.second, b.ts + b.dur);
      busy += b.dur;
    }
  }
  double windows = 0, steps = 0;
  for (auto& [s, w] : window) {
    if (std::isfinite(w.first) && w.second > w.first) windows += w.second - w.first;
  }
  for (auto& [s, t] : stepTime) steps += t;
  const int ranks = static_cast<int>(trace.process.size());
  const double bubble = windows > 0 ? 100 * (1 - busy / (ranks * windows)) : 0;
  const double meanStep = stepTime.empty() ? 0 : steps / stepTime.size() / 1e3;

  for (auto& [s, t] : stepTime) out.steps += (out.steps.empty() ? "" : ", ") + std::to_string(s);
  out.t0 = t0;
  out.t1 = t1;
  out.bubble = bubble;
  out.meanStepMs = meanStep;
  return out;
}

// Pixels: a time's x, a rank's row.
struct Canvas {
  double t0 = 0, scale = 1;
  std::map<int, int> row;  // pid -> row
  double x(double ts) const { return kLeft + (ts - t0) * scale; }
  int y(int pid) const { return kTop + row.at(pid) * kRow; }
};

// One block: compute (coloured by micro-batch), waits (hatched), swap I/O, step marks.
void drawBlock(std::ostream& os, const Canvas& canvas, const Block& b) {
  const int y = canvas.y(b.pid);
  const double bx = canvas.x(b.ts), bw = std::max(0.8, b.dur * canvas.scale);
  if (b.cat == "recv" || b.cat == "collective") {
    os << "<rect x=\"" << bx << "\" y=\"" << y + kRow - 14 << "\" width=\"" << bw << "\" height=\"9\" fill=\"url(#"
       << (b.cat == "recv" ? "wait" : "collective") << ")\"><title>" << escape(b.name) << "</title></rect>\n";
  } else if (b.cat == "io") {
    os << "<rect x=\"" << bx << "\" y=\"" << y + kRow - 4 << "\" width=\"" << bw
       << "\" height=\"3\" fill=\"#2471a3\"><title>" << escape(b.name) << "</title></rect>\n";
  } else if (b.cat == "recompute" || b.cat == "swap") {
    return;  // nested in compute blocks: drawn on top of them (drawBands)
  } else if (b.cat == "step") {
    os << "<line x1=\"" << bx << "\" y1=\"" << y - 2 << "\" x2=\"" << bx << "\" y2=\"" << y + kRow - 2
       << "\" stroke=\"#333\" stroke-width=\"1\"/>\n";
  } else if (b.cat == "compute") {
    const bool backward = !b.name.empty() && b.name[0] == 'B';
    const std::string fill = b.microBatch >= 0 ? colour(b.microBatch, backward) : "#999";
    os << "<rect x=\"" << bx << "\" y=\"" << y + 3 << "\" width=\"" << bw << "\" height=\"" << kRow - 20
       << "\" fill=\"" << fill << "\" stroke=\"#222\" stroke-width=\"0.3\"><title>" << escape(b.name) << " (step "
       << b.step << ", " << b.dur / 1e3 << " ms)</title></rect>\n";
    if (bw > 18 && b.microBatch >= 0) {
      os << "<text x=\"" << bx + 3 << "\" y=\"" << y + 17 << "\" fill=\"" << (backward ? "#fff" : "#000") << "\">"
         << escape(b.name) << "</text>\n";
    }
  }
}

void drawBands(std::ostream& os, const Canvas& canvas, const std::vector<Block>& blocks) {
  // Nested in forward/backward blocks: recomputes (orange) and swap stalls (red) as a band at the top.
  for (auto& b : blocks) {
    if (b.cat != "recompute" && b.cat != "swap") continue;
    const int y = canvas.y(b.pid);
    os << "<rect x=\"" << canvas.x(b.ts) << "\" y=\"" << y + 3 << "\" width=\"" << std::max(0.8, b.dur * canvas.scale)
       << "\" height=\"4\" fill=\"" << (b.cat == "recompute" ? "#e67e22" : "#c0392b") << "\"><title>"
       << escape(b.name) << "</title></rect>\n";
  }
}

void drawAxis(std::ostream& os, const Canvas& canvas, double t0, double t1, int ranks) {
  // Axis: about 10 ticks on a round millisecond step.
  const double spanMs = (t1 - t0) / 1e3;
  double tick = std::pow(10.0, std::floor(std::log10(std::max(spanMs / 10, 1e-3))));
  if (spanMs / tick > 20) tick *= 5;
  else if (spanMs / tick > 10) tick *= 2;
  const int axisY = kTop + ranks * kRow + 4;
  os << "<line x1=\"" << kLeft << "\" y1=\"" << axisY << "\" x2=\"" << kWidth - kRight << "\" y2=\"" << axisY
     << "\" stroke=\"#333\"/>\n";
  os.precision(tick < 1 ? 2 : 0);
  for (double ms = 0; ms <= spanMs + 1e-9; ms += tick) {
    const double tx = canvas.x(t0 + ms * 1e3);
    os << "<line x1=\"" << tx << "\" y1=\"" << axisY << "\" x2=\"" << tx << "\" y2=\"" << axisY + 5
       << "\" stroke=\"#333\"/><text x=\"" << tx << "\" y=\"" << axisY + 18 << "\" text-anchor=\"middle\">" << ms
       << " ms</text>\n";
  }
}

}  // namespace

std::string timelineSvg(const std::string& tracePath, SvgSize* size) {
  const auto trace = readTrace(tracePath);
  const auto summary = summarize(trace);
  const int ranks = static_cast<int>(trace.process.size());
  const int height = kTop + ranks * kRow + kBottom;
  if (size) *size = {kWidth, height};
  Canvas canvas;
  canvas.t0 = summary.t0;
  canvas.scale = (kWidth - kLeft - kRight) / std::max(1.0, summary.t1 - summary.t0);
  for (auto& [pid, name] : trace.process) canvas.row[pid] = static_cast<int>(canvas.row.size());
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << kWidth << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<defs><pattern id=\"wait\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
     << "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/>"
     << "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c0392b\" stroke-width=\"2\"/></pattern>"
     << "<pattern id=\"collective\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
     << "patternTransform=\"rotate(-45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/>"
     << "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#7d3c98\" stroke-width=\"2\"/></pattern></defs>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  os << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Sluice timeline: " << ranks << " rank"
     << (ranks > 1 ? "s" : "") << ", steps " << summary.steps << "; step time " << summary.meanStepMs << " ms; bubble " << summary.bubble
     << "%</text>\n"
     << "<text x=\"10\" y=\"40\" fill=\"#555\">F/B: forward/backward per micro-batch (colour); grey: optimizer; "
        "hatched: waits on a receive (red) or a collective (purple); top band: recompute (orange), swap stall "
        "(red); blue: swap I/O</text>\n";
  for (auto& [pid, name] : trace.process) {
    const int y = canvas.y(pid);
    os << "<rect x=\"" << kLeft << "\" y=\"" << y << "\" width=\"" << (kWidth - kLeft - kRight) << "\" height=\""
       << kRow - 4 << "\" fill=\"#f4f4f4\"/>\n"
       << "<text x=\"10\" y=\"" << y + kRow / 2 << "\">" << escape(name) << "</text>\n";
  }
  for (const auto& b : trace.blocks) drawBlock(os, canvas, b);
  drawBands(os, canvas, trace.blocks);
  drawAxis(os, canvas, summary.t0, summary.t1, ranks);
  os << "</svg>\n";
  return os.str();
}

}  // namespace sluice
