#include "memory/CountingAllocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/Bytes.h"
#include "core/Error.h"

namespace sluice::memory {
namespace {

// The header keeps the payload aligned as c10 aligns (64 bytes). Large
// blocks are aligned to the page instead, so that the swap tier can write and
// read them with O_DIRECT (no page-cache copy): their header sits just below
// a page-aligned payload, in a page of its own.
constexpr size_t kHeader = 64;
constexpr size_t kPage = 4096;
constexpr size_t kPageAlignFrom = 256 * 1024;

struct Header {
  int64_t bytes;
  void* raw;  // what to free
};

std::atomic<int64_t> current{0}, peak{0}, allocations{0}, limit{0};
std::atomic<bool> installed{false};
std::mutex limitMutex;
std::string limitWhat;

void countFree(void* data) {
  if (!data) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeader);
  current.fetch_sub(header->bytes);
  c10::free_cpu(header->raw);
}

void raisePeak(int64_t now) {
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return {nullptr, nullptr, &countFree, c10::Device(c10::DeviceType::CPU)};
    const auto n = static_cast<int64_t>(nbytes);
    const int64_t now = current.fetch_add(n) + n;
    const int64_t cap = limit.load();
    if (cap > 0 && now > cap) {
      current.fetch_sub(n);
      std::string what;
      {
        std::lock_guard<std::mutex> lock(limitMutex);
        what = limitWhat;
      }
      throw MemoryError("out of memory: " + what + " tried to allocate " + formatBytesExact(n) + " with " +
                        formatBytesExact(now - n) + " allocated; the limit (memory.budget_mb with memory.hard_limit) is " +
                        formatBytesExact(cap));
    }
    char* data = nullptr;
    void* raw = nullptr;
    if (nbytes >= kPageAlignFrom) {
      raw = c10::alloc_cpu(nbytes + 2 * kPage);
      const auto address = reinterpret_cast<uintptr_t>(raw) + kPage;
      data = reinterpret_cast<char*>((address + kPage - 1) / kPage * kPage);
    } else {
      raw = c10::alloc_cpu(nbytes + kHeader);
      data = static_cast<char*>(raw) + kHeader;
    }
    auto* header = reinterpret_cast<Header*>(data - kHeader);
    header->bytes = n;
    header->raw = raw;
    raisePeak(now);
    allocations.fetch_add(1);
    return {data, data, &countFree, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &countFree; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

void installCountingAllocator() {
  static CountingAllocator allocator;
  static std::once_flag once;
  std::call_once(once, [] {
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    installed = true;
  });
}

bool countingAllocatorInstalled() { return installed.load(); }

AllocatorStats allocatorStats() { return {current.load(), peak.load(), allocations.load()}; }

void resetPeak() { peak.store(current.load()); }

void setAllocationLimit(int64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(limitMutex);
  limitWhat = what;
  limit.store(bytes);
}

int64_t allocationLimit() { return limit.load(); }

int64_t residentPeakBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream is(line.substr(6));
      int64_t kib = 0;
      is >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace sluice::memory
