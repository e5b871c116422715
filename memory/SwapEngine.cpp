#include "memory/SwapEngine.h"

#include <torch/types.h>

#include <algorithm>
#include <chrono>

#include "core/Error.h"

namespace sluice::memory {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string kib(int64_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

}  // namespace

std::shared_ptr<SwapEngine> SwapEngine::start(std::unique_ptr<SwapTier> tier, int64_t windowBytes) {
  std::shared_ptr<SwapEngine> engine(new SwapEngine(std::move(tier), windowBytes));
  engine->thread_ = std::thread([raw = engine.get()] { raw->run(); });
  return engine;
}

SwapEngine::SwapEngine(std::unique_ptr<SwapTier> tier, int64_t windowBytes)
    : tier_(std::move(tier)), window_(std::max<int64_t>(0, windowBytes)) {}

SwapEngine::~SwapEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  done_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string SwapEngine::describe() const { return tier_->describe(); }

void SwapEngine::setTrace(TraceRecorder* trace) {
  std::lock_guard<std::mutex> lock(mutex_);
  trace_ = trace;
}

void SwapEngine::failLocked(std::exception_ptr e) {
  if (!error_) error_ = e;
  done_.notify_all();
}

void SwapEngine::rethrowLocked() {
  if (error_) std::rethrow_exception(error_);
  SLUICE_CHECK(!stop_, MemoryError, "the swap engine was stopped");
}

void SwapEngine::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void SwapEngine::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return error_ || stop_ || pendingWriteBytes_ == 0; });
  rethrowLocked();
}

SwapStats SwapEngine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// One window for both directions: bytes on their way to the tier plus bytes
// read ahead and not yet used stay within it (reads always progress when
// nothing is read ahead; writes when nothing is queued).
bool SwapEngine::readAllowedLocked(const SwapSlot& slot) const {
  return prefetchedBytes_ == 0 || prefetchedBytes_ + pendingWriteBytes_ + slot.bytes_ <= window_;
}

void SwapEngine::waitForWriteRoomLocked(std::unique_lock<std::mutex>& lock, int64_t bytes, int microBatch) {
  auto fits = [&] { return pendingWriteBytes_ == 0 || pendingWriteBytes_ + prefetchedBytes_ + bytes <= window_; };
  if (fits()) return;
  // Memory on its way to the tier stays within the window: wait for the I/O thread.
  const auto t0 = Clock::now();
  const auto mark = trace_ ? trace_->current() : TraceRecorder::Mark{};
  done_.wait(lock, [&] { return error_ || stop_ || fits(); });
  stats_.stallSeconds += since(t0);
  if (trace_) trace_->add(mark, "stall: swap window full", "compute", microBatch, "swap");
  rethrowLocked();
}

void SwapEngine::queueWriteLocked(const std::shared_ptr<SwapSlot>& slot) {
  slot->state_ = SwapSlot::State::Queued;
  slot->after_ = tier_->orderAfterCompute();
  writes_.push_back(slot);
  pendingWriteBytes_ += slot->bytes_;
  work_.notify_one();
}

std::shared_ptr<SwapSlot> SwapEngine::swapOut(const c10::Storage& storage, int microBatch) {
  std::unique_lock<std::mutex> lock(mutex_);
  rethrowLocked();
  const auto bytes = static_cast<int64_t>(storage.nbytes());
  waitForWriteRoomLocked(lock, bytes, microBatch);
  auto slot = std::make_shared<SwapSlot>();
  slot->storage_ = storage;
  slot->bytes_ = bytes;
  slot->microBatch_ = microBatch;
  slot->engine_ = weak_from_this();
  queueWriteLocked(slot);
  return slot;
}

void SwapEngine::evict(const std::shared_ptr<SwapSlot>& slot) {
  using State = SwapSlot::State;
  std::unique_lock<std::mutex> lock(mutex_);
  rethrowLocked();
  if (slot->state_ != State::Resident) return;
  if (slot->prefetched_) {
    slot->prefetched_ = false;
    prefetchedBytes_ -= slot->bytes_;
  }
  slot->queuedForRead_ = false;
  ++stats_.evictions;
  if (slot->location_ >= 0) {  // the tier still has its bytes
    slot->storage_ = c10::Storage();
    slot->state_ = State::OnTier;
  } else {  // read back before its write started: write it now
    waitForWriteRoomLocked(lock, slot->bytes_, slot->microBatch_);
    if (slot->state_ == State::Resident) queueWriteLocked(slot);
  }
  done_.notify_all();
  work_.notify_one();
}

void SwapEngine::prefetch(const std::vector<std::shared_ptr<SwapSlot>>& slots) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& s : slots) {
    if (s->queuedForRead_ || s->state_ == SwapSlot::State::Resident || s->state_ == SwapSlot::State::Released) continue;
    s->queuedForRead_ = true;
    reads_.push_back(s);
  }
  work_.notify_one();
}

c10::Storage SwapEngine::swapIn(SwapSlot& slot) {
  using State = SwapSlot::State;
  std::unique_lock<std::mutex> lock(mutex_);
  rethrowLocked();
  if (slot.state_ == State::Queued) {  // the write has not started: keep the bytes where they are
    writes_.erase(std::remove_if(writes_.begin(), writes_.end(), [&](auto& s) { return s.get() == &slot; }),
                  writes_.end());
    pendingWriteBytes_ -= slot.bytes_;
    slot.state_ = State::Resident;
    done_.notify_all();
    return slot.storage_;
  }
  if (slot.state_ != State::Resident) {
    const auto t0 = Clock::now();
    const auto mark = trace_ ? trace_->current() : TraceRecorder::Mark{};
    ++stats_.demandReads;
    done_.wait(lock, [&] { return error_ || stop_ || slot.state_ != State::Writing; });
    rethrowLocked();
    if (slot.state_ == State::OnTier) {
      urgent_ = nullptr;
      for (auto& w : reads_) {
        auto s = w.lock();
        if (s.get() == &slot) urgent_ = s;
      }
      if (!urgent_) {
        // Not queued yet: queue it first in line (kept alive by the caller's record).
        auto holder = std::shared_ptr<SwapSlot>(std::shared_ptr<SwapSlot>(), &slot);
        urgent_ = holder;
      }
      work_.notify_one();
    }
    done_.wait(lock, [&] { return error_ || stop_ || slot.state_ == State::Resident; });
    stats_.stallSeconds += since(t0);
    if (trace_) trace_->add(mark, "stall: swap-in " + kib(slot.bytes_), "compute", slot.microBatch_, "swap");
    rethrowLocked();
  }
  SLUICE_CHECK(slot.state_ == State::Resident, MemoryError, "swap: a released slot was read (internal error)");
  tier_->handOver(slot.storage_);
  if (slot.prefetched_) {
    slot.prefetched_ = false;
    prefetchedBytes_ -= slot.bytes_;
    done_.notify_all();
    work_.notify_one();
  }
  return slot.storage_;
}

void SwapEngine::release(SwapSlot& slot) {
  using State = SwapSlot::State;
  std::lock_guard<std::mutex> lock(mutex_);
  switch (slot.state_) {
    case State::Queued:
      writes_.erase(std::remove_if(writes_.begin(), writes_.end(), [&](auto& s) { return s.get() == &slot; }),
                    writes_.end());
      pendingWriteBytes_ -= slot.bytes_;
      slot.storage_ = c10::Storage();
      slot.state_ = State::Released;
      done_.notify_all();
      break;
    case State::Writing:
    case State::Reading:
      slot.releaseAfterIo_ = true;
      break;
    case State::OnTier:
      releases_.emplace_back(slot.location_, slot.bytes_);
      slot.state_ = State::Released;
      work_.notify_one();
      break;
    case State::Resident:
      if (slot.prefetched_) prefetchedBytes_ -= slot.bytes_, slot.prefetched_ = false;
      slot.storage_ = c10::Storage();
      if (slot.location_ >= 0) releases_.emplace_back(slot.location_, slot.bytes_);
      slot.state_ = State::Released;
      work_.notify_one();
      done_.notify_all();
      break;
    case State::Released:
      break;
  }
}

// The next read to run (the demanded one first, then prefetches in the
// schedule's order while the window allows); nullptr when none may run now.
std::shared_ptr<SwapSlot> SwapEngine::nextReadLocked() {
  using State = SwapSlot::State;
  if (urgent_ && urgent_->state_ == State::OnTier) return urgent_;
  while (!reads_.empty()) {
    auto s = reads_.front().lock();
    if (!s || s->state_ == State::Released || s->state_ == State::Resident) {
      reads_.pop_front();
      continue;
    }
    if (s->state_ != State::OnTier || !readAllowedLocked(*s)) return nullptr;
    reads_.pop_front();
    return s;
  }
  return nullptr;
}

// One batch: every queued write, then one sync for all of them. Called and
// returns with the lock held; the I/O runs without it.
void SwapEngine::writeBatch(std::unique_lock<std::mutex>& lock) {
  using State = SwapSlot::State;
  std::vector<std::shared_ptr<SwapSlot>> batch(writes_.begin(), writes_.end());
  writes_.clear();
  int64_t batchBytes = 0;
  int batchMicroBatch = batch.front()->microBatch_;
  for (auto& s : batch) {
    s->state_ = State::Writing;
    batchBytes += s->bytes_;
    if (s->microBatch_ != batchMicroBatch) batchMicroBatch = -1;
  }
  TraceRecorder* trace = trace_;
  lock.unlock();
  const auto mark = trace ? trace->current() : TraceRecorder::Mark{};
  std::vector<int64_t> where;
  for (auto& s : batch) where.push_back(tier_->write(s->storage_.data(), s->bytes_, s->after_));
  tier_->sync();
  if (trace) {
    trace->add(mark, "swap out " + std::to_string(batch.size()) + " (" + kib(batchBytes) + ")", "io",
               batchMicroBatch);
  }
  lock.lock();
  for (size_t i = 0; i < batch.size(); ++i) {
    auto& s = batch[i];
    s->location_ = where[i];
    s->storage_ = c10::Storage();  // on the tier now: let the memory go
    s->after_.reset();
    pendingWriteBytes_ -= s->bytes_;
    stats_.bytesWritten += s->bytes_;
    ++stats_.writes;
    if (s->releaseAfterIo_) {
      releases_.emplace_back(s->location_, s->bytes_);
      s->state_ = State::Released;
    } else {
      s->state_ = State::OnTier;
    }
  }
}

// Reads slot s back from the tier (a demand read when it is the urgent one).
// Called and returns with the lock held; the I/O runs without it.
void SwapEngine::readOne(std::unique_lock<std::mutex>& lock, const std::shared_ptr<SwapSlot>& s) {
  using State = SwapSlot::State;
  const bool demanded = s == urgent_;
  if (demanded) urgent_ = nullptr;
  s->state_ = State::Reading;
  TraceRecorder* trace = trace_;
  lock.unlock();
  const auto mark = trace ? trace->current() : TraceRecorder::Mark{};
  auto storage = tier_->emptyStorage(s->bytes_);
  tier_->read(s->location_, storage.mutable_data(), s->bytes_);
  if (trace) trace->add(mark, std::string(demanded ? "swap in (demand) " : "swap in ") + kib(s->bytes_), "io", s->microBatch_);
  lock.lock();
  stats_.bytesRead += s->bytes_;
  ++stats_.reads;
  if (s->releaseAfterIo_) {
    releases_.emplace_back(s->location_, s->bytes_);
    s->state_ = State::Released;
  } else {
    s->storage_ = storage;
    s->state_ = State::Resident;
    if (!demanded) {
      s->prefetched_ = true;
      prefetchedBytes_ += s->bytes_;
    }
  }
}

void SwapEngine::run() {
  using State = SwapSlot::State;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_.wait(lock, [&] {
      if (stop_ || error_) return true;
      if (!writes_.empty() || !releases_.empty()) return true;
      if (urgent_ && urgent_->state_ == State::OnTier) return true;
      if (!reads_.empty()) {
        auto s = reads_.front().lock();
        return !s || s->state_ != State::OnTier || readAllowedLocked(*s);
      }
      return false;
    });
    if (stop_ || error_) return;
    try {
      if (!releases_.empty()) {
        auto extents = std::move(releases_);
        releases_.clear();
        lock.unlock();
        for (auto& [at, bytes] : extents) tier_->release(at, bytes);
        lock.lock();
        continue;
      }
      if (!writes_.empty()) {
        writeBatch(lock);
        done_.notify_all();
        continue;
      }
      auto s = nextReadLocked();
      if (!s) {
        if (urgent_ && urgent_->state_ != State::OnTier) urgent_ = nullptr;
        continue;
      }
      readOne(lock, s);
      done_.notify_all();
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      failLocked(std::current_exception());
      return;
    }
  }
}

}  // namespace sluice::memory
