#include "launcher/Timeline.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/Files.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
constexpr int kRounds = 8;
constexpr int kTag = 15990;  // below the communicator's limit, above the pipeline's tags
const char* kStreams[] = {"compute", "recv", "send", "step"};

int streamId(const std::string& stream) {
  for (int i = 0; i < 4; ++i) {
    if (stream == kStreams[i]) return i;
  }
  return 0;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// This rank's clock minus rank 0's, in microseconds (0 on rank 0).
double clockOffsetUs(const Communicator& world) {
  const TensorSpec one{{1}, torch::kDouble};
  double offset = 0;
  for (int r = 1; r < world.size(); ++r) {
    if (world.rank() == 0) {
      double best = std::numeric_limits<double>::infinity(), bestOffset = 0;
      for (int k = 0; k < kRounds; ++k) {
        const double t1 = pipeline::TraceRecorder::nowUs();
        world.send(torch::tensor({t1}, torch::kDouble), r, kTag);
        const double tr = world.recv(one, r, kTag).tensor.item<double>();
        const double t2 = pipeline::TraceRecorder::nowUs();
        if (t2 - t1 < best) {
          best = t2 - t1;
          bestOffset = tr - (t1 + t2) / 2;
        }
      }
      world.send(torch::tensor({bestOffset}, torch::kDouble), r, kTag + 1);
    } else if (world.rank() == r) {
      for (int k = 0; k < kRounds; ++k) {
        world.recv(one, 0, kTag);
        world.send(torch::tensor({pipeline::TraceRecorder::nowUs()}, torch::kDouble), 0, kTag);
      }
      offset = world.recv(one, 0, kTag + 1).tensor.item<double>();
    }
  }
  return offset;
}

}  // namespace

std::string writeTimeline(const Communicator& world, const pipeline::TraceRecorder& trace,
                          const std::string& processName, const std::string& outDir) {
  const double offset = clockOffsetUs(world);
  const int rank = world.rank();
  std::ostringstream os;
  os << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"args\": {\"name\": " << jsonString(processName) << "}},\n"
     << "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " << rank << ", \"args\": {\"sort_index\": " << rank
     << "}}";
  for (int i = 0; i < 4; ++i) {
    os << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank << ", \"tid\": " << i
       << ", \"args\": {\"name\": \"" << kStreams[i] << "\"}}";
  }
  char num[64];
  for (const auto& e : trace.events()) {
    std::snprintf(num, sizeof(num), "%.3f, \"dur\": %.3f", e.startUs - offset, e.durUs);
    os << ",\n{\"name\": " << jsonString(e.name) << ", \"cat\": \"" << e.stream << "\", \"ph\": \"X\", \"pid\": " << rank
       << ", \"tid\": " << streamId(e.stream) << ", \"ts\": " << num << ", \"args\": {\"step\": " << e.step;
    if (e.microBatch >= 0) os << ", \"micro_batch\": " << e.microBatch;
    os << "}}";
  }
  const fs::path part = fs::path(outDir) / ("trace.rank_" + std::to_string(rank) + ".part");
  writeFileAtomically(part.string(), os.str());
  world.barrier();
  std::string path;
  if (rank == 0) {
    std::string all = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    for (int r = 0; r < world.size(); ++r) {
      const fs::path p = fs::path(outDir) / ("trace.rank_" + std::to_string(r) + ".part");
      all += (r ? ",\n" : "") + readFile(p.string());
      fs::remove(p);
    }
    all += "\n]}\n";
    path = (fs::path(outDir) / "trace.json").string();
    writeFileAtomically(path, all);
  }
  world.barrier();
  return path;
}

}  // namespace sluice
