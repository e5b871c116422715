// Precompiled header shared by every Sluice target: the LibTorch includes are
// most of the compile time of each translation unit.
#pragma once
#include <torch/torch.h>
#include <torch/script.h>
#include <map>
#include <memory>
#include <string>
#include <vector>
