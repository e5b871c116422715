#include "telemetry/TensorBoard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/Error.h"

namespace sluice {
namespace {

std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <class T>
void putFixed(std::string& out, T v) {  // little-endian, as on every machine LibTorch builds for here
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void putBytes(std::string& out, int field, const std::string& bytes) {
  putVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  putVarint(out, bytes.size());
  out += bytes;
}

double wallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string eventHeader(int64_t step) {
  std::string e;
  putVarint(e, (1 << 3) | 1);
  putFixed<double>(e, wallTime());
  putVarint(e, 2 << 3);
  putVarint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const std::string& bytes) {
  static const auto table = makeTable();
  uint32_t c = 0xffffffffu;
  for (unsigned char ch : bytes) c = table[(c ^ ch) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof(host) - 1);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wallTime())) +
                                         "." + host + ".sluice"))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  SLUICE_CHECK(out_, Error, "cannot write TensorBoard events file " << path_);
  std::string first = eventHeader(0);
  putBytes(first, 3, "brain.Event:2");
  writeRecord(first);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  std::string v;
  putBytes(v, 1, tag);
  putVarint(v, (2 << 3) | 5);
  putFixed<float>(v, static_cast<float>(value));
  std::string summary;
  putBytes(summary, 1, v);
  std::string event = eventHeader(step);
  putBytes(event, 5, summary);
  writeRecord(event);
}

void TensorBoardWriter::writeRecord(const std::string& event) {
  std::string length;
  putFixed<uint64_t>(length, event.size());
  std::string record = length;
  putFixed<uint32_t>(record, masked(crc32c(length)));
  record += event;
  putFixed<uint32_t>(record, masked(crc32c(event)));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

}  // namespace sluice
