// checkpoint::SafeTensors: named tensors in the safetensors format (Hugging
// Face's: what `safetensors.torch.save_file` writes and `from_pretrained`
// reads), for `sluice export --format safetensors` and model.weights.
//
// The file: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
// ..., "__metadata__": {...}}, padded with spaces to a multiple of 8), then
// the tensors' bytes back to back, little-endian, offsets counted from the
// end of the header. The JSON is read and written with nlohmann-json.
//
//   saveSafeTensors("out/model.safetensors", {{"h.0.mlp.c_fc.weight", w}});   // atomic (temp + rename)
//   auto tensors = loadSafeTensors("weights.safetensors");                     // name -> CPU tensor
//   loadWeights(module, "weights.safetensors");   // model.weights: every parameter, checked
//
// Reading throws DataError naming the file and what is wrong: too short, a
// header that is not JSON or not the format's, an unknown dtype, offsets
// outside the data or not matching the shape. Writing throws Error on I/O.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace sluice {

void saveSafeTensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
std::map<std::string, at::Tensor> loadSafeTensors(const std::string& path);

// A module's parameters and buffers by module path (the names checkpoints,
// exports and model.weights use).
std::map<std::string, at::Tensor> namedTensors(const torch::nn::Module& module);

// model.weights: copies the file's tensors into the module's parameters and
// buffers of the same names (no grad; tied names share storage and take the
// file's value). ConfigError naming the key and the tensor when a name is
// not the module's, a shape or dtype differs, or a parameter is missing
// (a tied one needs one of its names, as Hugging Face's save_pretrained
// writes it; buffers the file lacks keep their values), and for a damaged file (the
// reader's DataError as a ConfigError). Returns the count loaded.
int64_t loadWeights(torch::nn::Module& module, const std::string& path);

}  // namespace sluice
