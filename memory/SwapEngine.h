// memory::SwapEngine: moves storages to and from a SwapTier on one I/O thread.
//
// Contract
// - One window bounds the memory in flight: bytes queued for writing plus
//   bytes read ahead and not yet handed out.
// - swapOut(storage) queues the storage's bytes for writing and returns its
//   SwapSlot; the slot holds the storage until the write is durable, then lets
//   it go (the memory is freed once nothing else holds it). The caller (the
//   compute thread) blocks while the window is full (and a write is queued):
//   memory in flight stays bounded, at the price of a stall.
// - prefetch(slots) queues reads in the given order (the order backward will
//   need them); the I/O thread reads ahead while the window allows.
// - swapIn(slot) returns the bytes as a storage, blocking until they are
//   resident (a slot not prefetched yet jumps the queue). Before the write
//   started it returns the original storage and cancels the write.
// - release(slot) frees the slot's memory and its space on the tier.
// - evict(slot) gives back the memory of a slot read in (swapIn, or read
//   ahead) while keeping its bytes on the tier, so a later swapIn or
//   prefetch reads them again: a split backward (zero-bubble schedules)
//   reads a storage at BackwardInput and again at BackwardWeight, and holds
//   nothing of it in between. A slot whose write was cancelled (swapIn came
//   first) is written again, under the window like swapOut. Other states:
//   nothing to do.
// - An I/O error stops the engine; every later call (and any waiting one)
//   throws it as MemoryError on the compute thread. Nothing waits forever: a
//   failed or stopped engine wakes every waiter.
// Only the I/O thread touches the tier. Slots may outlive the engine
// (release() is then a no-op). Stall time (compute thread blocked) is counted.
// With setTrace, writes and reads are trace events on the "io" stream and
// the compute thread's stalls nested "swap" events on "compute" (core/Trace.h).
#pragma once

#include <c10/core/Storage.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/Trace.h"
#include "memory/SwapTier.h"

namespace sluice::memory {

struct SwapStats {
  int64_t bytesWritten = 0, bytesRead = 0, writes = 0, reads = 0;
  int64_t demandReads = 0;   // reads the compute thread waited for, not prefetched in time
  int64_t evictions = 0;     // slots read in and given back to the tier until read again (evict)
  double stallSeconds = 0;   // compute thread blocked on the window or on a read
};

class SwapEngine;

class SwapSlot {
 public:
  int64_t bytes() const { return bytes_; }

 private:
  friend class SwapEngine;
  enum class State { Queued, Writing, OnTier, Reading, Resident, Released };
  State state_ = State::Queued;
  c10::Storage storage_;
  std::shared_ptr<void> after_;  // the tier's order token (SwapTier::orderAfterCompute)
  int64_t bytes_ = 0, location_ = -1;
  int microBatch_ = -1;         // for the trace
  bool prefetched_ = false;     // read ahead, not yet handed out (counts against the window)
  bool releaseAfterIo_ = false; // released while the I/O thread worked on it
  bool queuedForRead_ = false;
  std::weak_ptr<SwapEngine> engine_;
};

class SwapEngine : public std::enable_shared_from_this<SwapEngine> {
 public:
  static std::shared_ptr<SwapEngine> start(std::unique_ptr<SwapTier> tier, int64_t windowBytes);
  ~SwapEngine();
  SwapEngine(const SwapEngine&) = delete;
  SwapEngine& operator=(const SwapEngine&) = delete;

  // microBatch: the micro-batch whose forward saved it (trace events only).
  std::shared_ptr<SwapSlot> swapOut(const c10::Storage& storage, int microBatch = -1);
  void prefetch(const std::vector<std::shared_ptr<SwapSlot>>& slots);
  c10::Storage swapIn(SwapSlot& slot);
  void release(SwapSlot& slot);
  void evict(const std::shared_ptr<SwapSlot>& slot);
  // Throws the I/O thread's error, if any.
  void check();
  // Blocks until every queued write is on the tier (then throws its error, if any).
  void flush();
  SwapStats stats() const;
  std::string describe() const;
  int64_t windowBytes() const { return window_; }
  // Records I/O and stalls while `trace` is active; null: none. Set before use.
  void setTrace(TraceRecorder* trace);

 private:
  SwapEngine(std::unique_ptr<SwapTier> tier, int64_t windowBytes);
  void run();
  std::shared_ptr<SwapSlot> nextReadLocked();
  void writeBatch(std::unique_lock<std::mutex>& lock);
  void readOne(std::unique_lock<std::mutex>& lock, const std::shared_ptr<SwapSlot>& s);
  void failLocked(std::exception_ptr e);
  void rethrowLocked();
  bool readAllowedLocked(const SwapSlot& slot) const;
  // Blocks while `bytes` more on their way to the tier would overflow the window.
  void waitForWriteRoomLocked(std::unique_lock<std::mutex>& lock, int64_t bytes, int microBatch);
  void queueWriteLocked(const std::shared_ptr<SwapSlot>& slot);

  std::unique_ptr<SwapTier> tier_;
  const int64_t window_;
  mutable std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<std::shared_ptr<SwapSlot>> writes_;
  std::deque<std::weak_ptr<SwapSlot>> reads_;
  std::shared_ptr<SwapSlot> urgent_;
  std::vector<std::pair<int64_t, int64_t>> releases_;  // tier extents to free (I/O thread)
  int64_t pendingWriteBytes_ = 0, prefetchedBytes_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  SwapStats stats_;
  TraceRecorder* trace_ = nullptr;
  std::thread thread_;
};

}  // namespace sluice::memory
