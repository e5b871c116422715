// models::Pt2Archive: what torch.export.save(torch.export.export(...)) wrote
// (PyTorch 2.11's "pt2" archive, a zip read with LibTorch's own reader):
//   <name>/archive_format            "pt2"
//   <name>/models/model.json         the serialized ExportedProgram (JSON,
//                                    torch/_export/serde/schema.py)
//   <name>/data/weights/...          parameters and persistent buffers: raw
//                                    storage bytes, one file per storage, and
//                                    model_weights_config.json (FQN -> file,
//                                    dtype, sizes, strides, offset)
//   <name>/data/constants/...        non-persistent buffers and lifted
//                                    constants, the same way
//
// Contract
// - readPt2() throws ConfigError naming the file and what to do when the
//   file is missing, not a zip, not a pt2 archive, or holds a weight that
//   was pickled (a tensor subclass) or whose bytes do not cover its shape.
// - Tensors are CPU tensors with the archive's dtype, sizes and strides
//   (copied out of the zip). FQNs that named one tensor when exported (tied
//   weights: the same storage, sizes, strides and offset) name one tensor
//   here too.
// - program is the model.json document; Exported.cpp interprets it.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <ATen/core/Tensor.h>

#include <map>
#include <set>
#include <memory>
#include <string>

namespace sluice::models {

struct Pt2Archive {
  std::string path;
  std::shared_ptr<const nlohmann::json> program;   // models/model.json
  std::map<std::string, at::Tensor> tensors;    // weights and constants by FQN
  std::set<std::string> frozen;                 // FQNs saved with requires_grad False (frozen parameters)
};

Pt2Archive readPt2(const std::string& path);
// The program alone (models/model.json), for checks before loading weights.
std::shared_ptr<const nlohmann::json> readPt2Program(const std::string& path);

// torch.export's ScalarType code (schema.py) as LibTorch's; ConfigError
// naming `where` for a code it does not know.
c10::ScalarType pt2ScalarType(int code, const std::string& where);

}  // namespace sluice::models
