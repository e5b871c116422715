// Saved-tensor hooks see what autograd saves (pack) and reads back (unpack).
#include <gtest/gtest.h>

#include <torch/csrc/autograd/engine.h>

#include "memory/SavedTensorHooks.h"

namespace sluice::memory {
namespace {

// Note [saved tensor engine, first]: the engine that runs the process's
// first backward (and so owns the per-device queues) is the one the hooks
// use. CTest runs this alone in a fresh process (saved_tensor_engine), where
// a lazily installed engine would arrive only with the first scope, after
// that backward: the identity check below fails then.
TEST(SavedTensorEngine, RunsTheProcesssFirstBackward) {
  auto& first = torch::autograd::Engine::get_default_engine();
  auto x = torch::ones({3}, torch::requires_grad());
  (x * x).sum().backward();
  SavedBytesCounter counter;
  torch::Tensor y;
  {
    SavedTensorScope scope(counter.factory());
    y = (x * x).sum();
  }
  y.backward();
  EXPECT_EQ(counter.unpacks(), 2);
  EXPECT_EQ(&first, &torch::autograd::Engine::get_default_engine())
      << "autograd's engine changed after a backward had run: its device queues stay with the old one";
  EXPECT_TRUE(savedTensorEngineInstalled());
}

TEST(SavedTensorHooks, CountsWhatMatmulSavesAndBackwardReads) {
  auto a = torch::randn({8, 16}, torch::requires_grad());
  auto b = torch::randn({16, 4}, torch::requires_grad());
  SavedBytesCounter counter;
  torch::Tensor y;
  {
    SavedTensorScope scope(counter.factory());
    y = torch::mm(a, b);  // mm saves both operands for its backward
  }
  EXPECT_EQ(counter.bytes(), static_cast<int64_t>(a.nbytes() + b.nbytes()));
  EXPECT_EQ(counter.packs(), 2);
  EXPECT_EQ(counter.unpacks(), 0);
  y.sum().backward();
  EXPECT_EQ(counter.unpacks(), 2);
  // The hooks return the saved tensors unchanged: gradients are exact.
  EXPECT_TRUE(torch::allclose(a.grad(), torch::ones({8, 4}).mm(b.t())));
}

TEST(SavedTensorHooks, OutsideAScopeNothingIsSeenAndExcludedStoragesDoNotCount) {
  auto w = torch::randn({16, 16}, torch::requires_grad());
  auto x = torch::randn({4, 16}, torch::requires_grad());
  SavedBytesCounter counter;
  counter.exclude(w);
  (void)torch::mm(x, w);  // no scope: not counted
  EXPECT_EQ(counter.packs(), 0);
  {
    SavedTensorScope scope(counter.factory());
    auto y = torch::mm(x, w);
    auto z = torch::mm(x, w);  // x saved twice: counted once
  }
  EXPECT_EQ(counter.packs(), 4);
  EXPECT_EQ(counter.bytes(), static_cast<int64_t>(x.nbytes()));
}

}  // namespace
}  // namespace sluice::memory
