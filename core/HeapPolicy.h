// core::keepFreedMemoryInHeap: how the process's C heap treats large blocks.
// The one place that sets them (main() first thing, and Trainer::setUp).
//
// Note [malloc churn]: LibTorch's CPU allocator is plain malloc, and glibc's
// malloc serves blocks above a threshold (128 KiB, raised on the fly up to
// 32 MiB) with fresh mmap()s and returns them on free(), and it trims the
// heap top back to the kernel; either way the next block of that size
// starts on pages the kernel has to fault in and zero again. A training step
// allocates the same large tensors every micro-batch (the logits and their
// gradient: 8 MiB each on bench/large_vocab.yaml), so those faults were a
// large and erratic share of some ops: the loss's backward of that GPT took
// 3.4 ms or 9-13 ms depending on the heap's history, and three profiles of it
// put its second stage (cut 78) at 51, 58 and 76 ms; with the heap kept
// (then given as GLIBC_TUNABLES) at 53.0, 53.7 and 53.8 ms; swapping steps,
// whose buffers are such blocks too, ran about 20% faster (bench/memory).
// Called first thing in main(), this keeps freed blocks in the heap (mmap
// threshold 32 MiB, the most glibc accepts, and trim threshold 1 GiB; fixed,
// so glibc stops adjusting them): after the first step the same sizes reuse
// warm pages. The cost is that the process's resident memory stays at its
// peak. A malloc setting in GLIBC_TUNABLES wins: then nothing is changed.
// Returns whether it changed the settings.
#pragma once

namespace sluice {

bool keepFreedMemoryInHeap();

}  // namespace sluice
