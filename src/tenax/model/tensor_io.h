// The adapter between at::Tensor and the torch-free safetensors layer (checkpoint/safetensors.h):
// checkpoints and Hugging Face interop both go through here, so dtype names are mapped once.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"

namespace tenax::model {

// Serializes tensors (any device; copied to CPU, made contiguous) into safetensors bytes,
// keeping each tensor's dtype.
std::string SerializeTensors(const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});
// Reads every tensor of `file` into CPU tensors (copies; the file may be unmapped afterwards).
Result<std::vector<NamedTensor>> ReadTensors(const ckpt::SafetensorsFile& file);

}  // namespace tenax::model
