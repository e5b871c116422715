// telemetry::TensorBoardWriter: scalars in TensorBoard's event-file format
// (logging.tensorboard: output_dir/tb/events.out.tfevents.<seconds>.<host>),
// without TensorFlow: a file of records, each
//   uint64 length | uint32 masked CRC32C of the length | Event bytes | uint32 masked CRC32C of the bytes
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), whose
// first Event carries file_version "brain.Event:2" and the others a Summary
// of one simple_value. The Event and Summary messages (tensorflow/core/util/
// event.proto, framework/summary.proto) are encoded by hand: wall_time = 1
// (double), step = 2 (int64), file_version = 3, summary = 5; Summary.value =
// 1; Value.tag = 1, Value.simple_value = 2 (float).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace sluice {

uint32_t crc32c(const std::string& bytes);

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  void scalar(const std::string& tag, double value, int64_t step);
  void flush() { out_.flush(); }
  const std::string& path() const { return path_; }

 private:
  void writeRecord(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace sluice
