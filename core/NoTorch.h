// Force-included (-include) into the translation units CMake marks torch-free
// (sluice_torch_free() in the top-level CMakeLists.txt): they build without
// LibTorch's headers and without the precompiled header, in a second or two
// instead of ten. Any LibTorch header reaching such a unit, directly or
// through one of ours, stops the build here with "attempt to use poisoned
// C10_API": move the torch part out of the header it came through, or take
// the unit off the torch-free list.
#pragma once
#pragma GCC poison C10_API TORCH_API
