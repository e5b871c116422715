// The precompiled header of every target that uses LibTorch: the part of it
// most of their translation units read (tensors and their functions,
// autograd's engine, nn::Module, AdamW, the TorchScript IR). Kept to that on
// purpose: GCC re-instantiates a precompiled header's pending templates in
// every unit that uses it, so all of <torch/torch.h> and <torch/script.h>
// here cost 8 s per unit even in one that reads none of it (2.9 s this set;
// measured with an empty unit, docs/testing.md "Build time"). Units that
// need more (a model's nn modules, TorchScript files) include it themselves;
// units that need no LibTorch at all skip this header (sluice_torch_free()).
#pragma once
#include <torch/types.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <map>
#include <memory>
#include <string>
#include <vector>
