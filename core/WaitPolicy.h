// core::WaitPolicy: how a rank waits for a message or a collective (Note
// [waiting], core/Communicator.cpp), in one place for Work::wait, which
// waits that way, and for the step simulation (pipeline/ScheduleSimulation.h,
// Note [ranks sharing cores]), which plays it out.
//
// A wait polls back to back for pollSeconds (yielding the core between
// polls), then sleeps between polls: firstNapSeconds, doubling up to
// maxNapSeconds. A polling rank holds a core; a sleeping one does not, and
// sees a message only at its next poll.
//
//   waitPolicy(false).pollSeconds;  // 0.2: a core per rank, poll through pipeline waits
//   waitPolicy(true).pollSeconds;   // 0.0005: more ranks than cores, sleep soon
#pragma once

namespace sluice {

struct WaitPolicy {
  double pollSeconds = 0;      // 0: no polling phase
  double firstNapSeconds = 0;  // 0: never sleeps (sees a message as it comes)
  double maxNapSeconds = 0;
};

// The policy of a rank on a host with a core per rank, or with more ranks
// than cores (hostOversubscribed(), core/SystemInfo.h).
constexpr WaitPolicy waitPolicy(bool oversubscribed) {
  return {oversubscribed ? 0.0005 : 0.2, 50e-6, 1e-3};
}

}  // namespace sluice
