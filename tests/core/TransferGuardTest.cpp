// The transfer guard's logic (core/TransferGuard.h) from recorded copy
// sequences: the round-trip rule, its exemptions, the counts and the modes.
// The dispatcher hook that feeds it on a GPU is tested in tests/core/CudaTest.cpp.
#include <gtest/gtest.h>

#include "core/TransferGuard.h"

namespace sluice {
namespace {

using Kind = TransferScope::Kind;
constexpr auto H2D = TransferDirection::HostToDevice;
constexpr auto D2H = TransferDirection::DeviceToHost;

TransferEvent copy(TransferDirection d, int64_t numel, Kind scope = Kind::Compute, std::string context = "") {
  return TransferEvent{d, numel * 4, numel, scope, std::move(context)};
}

TEST(RoundTrip, DeviceToHostAndBackInsideAStepIsReportedNamingBothCopies) {
  RoundTripDetector d;
  d.beginStep();
  EXPECT_FALSE(d.observe(copy(D2H, 1024, Kind::Compute, "step 3, micro-batch 1, forward")));
  auto report = d.observe(copy(H2D, 1024, Kind::Compute, "step 3, micro-batch 1, forward"));
  ASSERT_TRUE(report);
  EXPECT_NE(report->find("device->host copy of 4.00 KiB (step 3, micro-batch 1, forward), then a host->device copy"),
            std::string::npos)
      << *report;
}

TEST(RoundTrip, HostToDeviceAndBackIsOneToo) {
  RoundTripDetector d;
  d.beginStep();
  EXPECT_FALSE(d.observe(copy(H2D, 100)));
  EXPECT_FALSE(d.observe(copy(H2D, 100)));  // two the same way: no round trip yet
  EXPECT_TRUE(d.observe(copy(D2H, 100)));
}

TEST(RoundTrip, StartUpEndAndOtherStepsAreExempt) {
  RoundTripDetector d;
  // Before any step (start-up) and between steps: nothing counts.
  EXPECT_FALSE(d.observe(copy(H2D, 1000)));
  EXPECT_FALSE(d.observe(copy(D2H, 1000)));
  d.beginStep();
  EXPECT_FALSE(d.observe(copy(D2H, 1000)));
  d.beginStep();  // the next step starts afresh: its first leg alone is no round trip
  EXPECT_FALSE(d.observe(copy(H2D, 1000)));
}

TEST(RoundTrip, ScalarsAndSluicesOwnCopiesAreExempt) {
  for (Kind exempt : {Kind::Data, Kind::Comm, Kind::Swap, Kind::LogRead, Kind::Setup}) {
    RoundTripDetector d;
    d.beginStep();
    // Exempt first leg, computed second leg: nothing (the data feed, staging, swap).
    EXPECT_FALSE(d.observe(copy(H2D, 512, exempt))) << TransferScope::name(exempt);
    EXPECT_FALSE(d.observe(copy(D2H, 512))) << TransferScope::name(exempt);
    // Computed first leg (D2H above), exempt second leg: nothing either.
    EXPECT_FALSE(d.observe(copy(H2D, 512, exempt))) << TransferScope::name(exempt);
  }
  RoundTripDetector d;
  d.beginStep();
  EXPECT_FALSE(d.observe(copy(D2H, 1)));  // a loss read with .item()
  EXPECT_FALSE(d.observe(copy(H2D, 1)));  // a scalar sent back
  // And a real round trip after them is still seen.
  EXPECT_FALSE(d.observe(copy(D2H, 64)));
  EXPECT_TRUE(d.observe(copy(H2D, 64)));
}

TEST(TransferGuard, CountsByDirectionAndScopeAndErrorModeThrowsAtTheEndOfTheStep) {
  const auto before = transfers::counts();
  transfers::setMode(TransferGuardMode::Error);
  transfers::beginStep();
  transfers::record(copy(H2D, 256, Kind::Data));
  transfers::record(copy(D2H, 256));
  transfers::record(copy(H2D, 256));  // completes a round trip: reported at endStep
  try {
    transfers::endStep();
    ADD_FAILURE() << "a round trip under transfer_guard error did not throw";
  } catch (const TransferError& e) {
    EXPECT_NE(std::string(e.what()).find("round trip inside a training step"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("logging.transfer_guard: error"), std::string::npos) << e.what();
  }
  const auto after = transfers::counts();
  EXPECT_EQ(after.copies[0] - before.copies[0], 2);
  EXPECT_EQ(after.copies[1] - before.copies[1], 1);
  EXPECT_EQ(after.bytes[0] - before.bytes[0], 2 * 1024);
  EXPECT_EQ(after.copiesByScope[static_cast<int>(Kind::Data)] - before.copiesByScope[static_cast<int>(Kind::Data)], 1);
  EXPECT_EQ(after.roundTrips - before.roundTrips, 1);

  // Warn and off: counted, never thrown; after endStep nothing counts as a leg.
  for (auto mode : {TransferGuardMode::Warn, TransferGuardMode::Off}) {
    transfers::setMode(mode);
    transfers::beginStep();
    transfers::record(copy(D2H, 256));
    transfers::record(copy(H2D, 256));
    EXPECT_NO_THROW(transfers::endStep());
  }
  transfers::record(copy(D2H, 256));
  transfers::setMode(TransferGuardMode::Error);
  transfers::beginStep();
  transfers::record(copy(H2D, 256));  // the D2H above was outside the step
  EXPECT_NO_THROW(transfers::endStep());
  transfers::setMode(TransferGuardMode::Warn);
}

TEST(TransferGuard, ModesParseAndBadNamesAreConfigErrors) {
  EXPECT_EQ(parseTransferGuardMode("off"), TransferGuardMode::Off);
  EXPECT_EQ(parseTransferGuardMode("warn"), TransferGuardMode::Warn);
  EXPECT_EQ(parseTransferGuardMode("error"), TransferGuardMode::Error);
  EXPECT_THROW(parseTransferGuardMode("loud"), ConfigError);
  // Scopes nest; the innermost names the copy.
  EXPECT_EQ(TransferScope::current(), Kind::Compute);
  {
    TransferScope outer(Kind::Setup);
    TransferScope inner(Kind::Comm);
    EXPECT_EQ(TransferScope::current(), Kind::Comm);
  }
  EXPECT_EQ(TransferScope::current(), Kind::Compute);
}

}  // namespace
}  // namespace sluice
