// core::TensorFile: named CPU tensors in one flat binary file.
//
// A small, self-checking container for checkpoints: a magic, a count, then
// per tensor its name, dtype, shape and raw bytes (contiguous). Names are any
// strings (module paths with dots). encode()/decode() work on bytes so the
// caller decides how to write them (writeFileDurably) and what to checksum;
// decode() throws Error naming `origin` for a truncated or foreign file.
//
//   std::map<std::string, at::Tensor> t{{"h.0.attn.c_attn.weight", w}};
//   writeFileDurably(path, encodeTensors(t));
//   auto back = decodeTensors(readFile(path), path);
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace sluice {

std::string encodeTensors(const std::map<std::string, at::Tensor>& tensors);
std::map<std::string, at::Tensor> decodeTensors(const std::string& bytes, const std::string& origin);

}  // namespace sluice
