// Note [no orphans] with real processes (launch/LauncherWatch.h):
// - a rank process that holds job.output_dir/.sluice.ranks keeps a new
//   launcher out (waitForEarlierRanks refuses after its wait) until it has
//   exited, and then lets it in;
// - a "rank" watching its "launcher" (SLUICE_LAUNCHER_PID, an ancestor) ends
//   with kLauncherDiedExit when the launcher is SIGKILLed; one whose
//   launcher pid is no ancestor of it is not watched.
// Processes synchronise through pipes; this test process is a child
// subreaper, so it can reap the orphaned "rank".
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/Error.h"
#include "launch/LauncherWatch.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TEST(LauncherWatch, ALiveRankKeepsTheNextJobOutUntilItExits) {
  const fs::path dir = fs::path(testing::TempDir()) / "ranks_lock";
  fs::remove_all(dir);
  fs::create_directories(dir);
  waitForEarlierRanks(dir.string(), 0);  // no ranks: in at once (and the file is made)
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t rank = ::fork();
  ASSERT_GE(rank, 0);
  if (rank == 0) {
    ::close(release[1]);  // else its own copy would keep the read below from ever ending
    holdRanksLock(dir.string());
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(release[0], &c, 1);  // until the test lets it end
    std::_Exit(0);
  }
  ::close(release[0]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  try {
    waitForEarlierRanks(dir.string(), 0.1);
    ADD_FAILURE() << "a new job got in while a rank held the directory";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks of an earlier job still run there"), std::string::npos) << e.what();
  }
  ::close(release[1]);  // the rank ends
  int status = 0;
  ASSERT_EQ(::waitpid(rank, &status, 0), rank);
  EXPECT_NO_THROW(waitForEarlierRanks(dir.string(), 0));
  fs::remove_all(dir);
}

TEST(LauncherWatch, ARankEndsWhenItsLauncherIsKilled) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const pid_t rank = ::fork();
    if (rank == 0) {
      ::setenv(kLauncherPidEnv, std::to_string(::getppid()).c_str(), 1);
      ::unsetenv(kLauncherHostEnv);
      const bool watched = watchLauncher();
      (void)!::write(ready[1], &rank, 0);
      const int r = ::getpid();
      (void)!::write(ready[1], &r, sizeof(r));
      if (!watched) std::_Exit(3);
      while (true) ::pause();  // only the watch ends it
    }
    while (true) ::pause();
  }
  int rank = 0;
  ASSERT_EQ(::read(ready[0], &rank, sizeof(rank)), static_cast<ssize_t>(sizeof(rank)));
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  ASSERT_EQ(::waitpid(rank, &status, 0), rank);  // reparented to this subreaper
  ASSERT_TRUE(WIFEXITED(status)) << "the rank was killed, not ended by its watch";
  EXPECT_EQ(WEXITSTATUS(status), kLauncherDiedExit);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(LauncherWatch, APidThatIsNoAncestorIsNotWatched) {
  EXPECT_TRUE(isAncestor(static_cast<int>(::getppid())));
  EXPECT_FALSE(isAncestor(static_cast<int>(::getpid())));
  EXPECT_FALSE(isAncestor(1));
}

}  // namespace
}  // namespace sluice
