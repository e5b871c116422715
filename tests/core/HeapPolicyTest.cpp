// core::keepFreedMemoryInHeap: a block of a size training allocates every
// micro-batch comes from the heap rather than a fresh mmap, and freeing it
// does not hand the pages back (so the next one reuses warm pages).
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "core/HeapPolicy.h"

namespace sluice {
namespace {

TEST(HeapPolicy, LargeBlocksStayInTheHeap) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) {
    EXPECT_FALSE(keepFreedMemoryInHeap());  // the user's settings win
    return;
  }
  ASSERT_TRUE(keepFreedMemoryInHeap());
  constexpr size_t kBytes = 24u << 20;  // above glibc's default thresholds, below ours
  const auto before = mallinfo2();
  auto* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  const auto held = mallinfo2();
  EXPECT_EQ(held.hblks, before.hblks) << "a 24 MiB block was mmapped";
  EXPECT_GE(held.arena, before.arena + kBytes - (before.fordblks < kBytes ? before.fordblks : kBytes));
  std::free(block);
  const auto after = mallinfo2();
  EXPECT_EQ(after.arena, held.arena) << "freeing the block trimmed the heap";
}

}  // namespace
}  // namespace sluice
