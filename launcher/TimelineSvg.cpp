#include "launcher/TimelineSvg.h"

#include <yaml-cpp/yaml.h>

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

std::string timelineSvg(const std::string& tracePath, SvgSize* size) {
  requireRegularFile(tracePath, "trace show: the trace");
  YAML::Node root;
  try {
    root = YAML::LoadFile(tracePath);
  } catch (const YAML::Exception& e) {
    throw ConfigError("trace show: cannot read " + tracePath + " as a trace (" + e.msg + ")");
  }
  SLUICE_CHECK(root.IsMap() && root["traceEvents"] && root["traceEvents"].IsSequence(), ConfigError,
               "trace show: " << tracePath << " is not a trace (no traceEvents list; write one with sluice train --trace)");
  std::map<int, std::string> process;
  std::vector<Block> blocks;
  for (const auto& e : root["traceEvents"]) {
    const std::string ph = e["ph"] ? e["ph"].as<std::string>() : "";
    const int pid = e["pid"] ? e["pid"].as<int>() : 0;
    if (ph == "M" && e["name"].as<std::string>() == "process_name") process[pid] = e["args"]["name"].as<std::string>();
    if (ph != "X") continue;
    Block b;
    b.name = e["name"].as<std::string>();
    b.cat = e["cat"] ? e["cat"].as<std::string>() : "";
    b.pid = pid;
    b.ts = e["ts"].as<double>();
    b.dur = e["dur"].as<double>();
    if (e["args"] && e["args"]["step"]) b.step = e["args"]["step"].as<int64_t>();
    if (e["args"] && e["args"]["micro_batch"]) b.microBatch = e["args"]["micro_batch"].as<int>();
    blocks.push_back(b);
    if (!process.count(pid)) process[pid] = "rank " + std::to_string(pid);
  }
  SLUICE_CHECK(!blocks.empty(), ConfigError, "trace show: " << tracePath << " has no events");
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  for (auto& b : blocks) {
    t0 = std::min(t0, b.ts);
    t1 = std::max(t1, b.ts + b.dur);
  }
  // Measured: per step, the window from its first start to its last forward/backward end; busy per rank.
  std::map<int64_t, std::pair<double, double>> window;  // step -> (start, end)
  std::map<int64_t, double> stepTime;                    // step -> longest step span
  double busy = 0;
  for (auto& b : blocks) {
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
  const int ranks = static_cast<int>(process.size());
  const double bubble = windows > 0 ? 100 * (1 - busy / (ranks * windows)) : 0;
  const double meanStep = stepTime.empty() ? 0 : steps / stepTime.size() / 1e3;

  const int height = kTop + ranks * kRow + kBottom;
  if (size) *size = {kWidth, height};
  const double scale = (kWidth - kLeft - kRight) / std::max(1.0, t1 - t0);
  auto x = [&](double ts) { return kLeft + (ts - t0) * scale; };
  std::map<int, int> row;
  for (auto& [pid, name] : process) row[pid] = static_cast<int>(row.size());

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
  std::string stepList;
  for (auto& [s, t] : stepTime) stepList += (stepList.empty() ? "" : ", ") + std::to_string(s);
  os << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Sluice timeline: " << ranks << " rank"
     << (ranks > 1 ? "s" : "") << ", steps " << stepList << "; step time " << meanStep << " ms; bubble " << bubble
     << "%</text>\n"
     << "<text x=\"10\" y=\"40\" fill=\"#555\">F/B: forward/backward per micro-batch (colour); grey: optimizer; "
        "hatched: waits on a receive (red) or a collective (purple); top band: recompute (orange), swap stall "
        "(red); blue: swap I/O</text>\n";
  for (auto& [pid, name] : process) {
    const int y = kTop + row[pid] * kRow;
    os << "<rect x=\"" << kLeft << "\" y=\"" << y << "\" width=\"" << (kWidth - kLeft - kRight) << "\" height=\""
       << kRow - 4 << "\" fill=\"#f4f4f4\"/>\n"
       << "<text x=\"10\" y=\"" << y + kRow / 2 << "\">" << escape(name) << "</text>\n";
  }
  for (auto& b : blocks) {
    const int y = kTop + row[b.pid] * kRow;
    const double bx = x(b.ts), bw = std::max(0.8, b.dur * scale);
    if (b.cat == "recv" || b.cat == "collective") {
      os << "<rect x=\"" << bx << "\" y=\"" << y + kRow - 14 << "\" width=\"" << bw << "\" height=\"9\" fill=\"url(#"
         << (b.cat == "recv" ? "wait" : "collective") << ")\"><title>" << escape(b.name) << "</title></rect>\n";
    } else if (b.cat == "io") {
      os << "<rect x=\"" << bx << "\" y=\"" << y + kRow - 4 << "\" width=\"" << bw
         << "\" height=\"3\" fill=\"#2471a3\"><title>" << escape(b.name) << "</title></rect>\n";
    } else if (b.cat == "recompute" || b.cat == "swap") {
      continue;  // nested in compute blocks: drawn on top of them below
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
  // Nested in forward/backward blocks: recomputes (orange) and swap stalls (red) as a band at the top.
  for (auto& b : blocks) {
    if (b.cat != "recompute" && b.cat != "swap") continue;
    const int y = kTop + row[b.pid] * kRow;
    os << "<rect x=\"" << x(b.ts) << "\" y=\"" << y + 3 << "\" width=\"" << std::max(0.8, b.dur * scale)
       << "\" height=\"4\" fill=\"" << (b.cat == "recompute" ? "#e67e22" : "#c0392b") << "\"><title>"
       << escape(b.name) << "</title></rect>\n";
  }
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
    const double tx = x(t0 + ms * 1e3);
    os << "<line x1=\"" << tx << "\" y1=\"" << axisY << "\" x2=\"" << tx << "\" y2=\"" << axisY + 5
       << "\" stroke=\"#333\"/><text x=\"" << tx << "\" y=\"" << axisY + 18 << "\" text-anchor=\"middle\">" << ms
       << " ms</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace sluice
