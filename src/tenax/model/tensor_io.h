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
// The same for the safetensors file at `path`, by name.
Result<std::map<std::string, at::Tensor>> ReadTensorFile(const std::string& path);

// Sharded files (docs/checkpoint_format.md, "Sharded tensors"): each tensor stored in a rank's
// file is the 1-D slice [begin, end) of the named tensor's flattened elements; the file's
// metadata maps the tensor name to {"shape": [...], "begin": b, "end": e}. With tensor
// parallelism the slice is taken from a block of the tensor instead: metadata
// "block": {"dim": d, "begin": b, "end": e} means [begin, end) indexes the flattened
// full.narrow(d, b, e - b) (row-major), e.g. an FSDP shard of a column-parallel TP shard.
struct TensorSlice {
  std::string name;
  std::vector<int64_t> full_shape;
  int64_t begin = 0;
  int64_t end = 0;
  at::Tensor values;   // 1-D
  int block_dim = -1;  // -1: the slice indexes the whole tensor
  int64_t block_begin = 0, block_end = 0;
};
std::string SerializeSlices(const std::vector<TensorSlice>& slices);
// Reassembles full tensors from the slices in `files` (any number of ranks, any split); every
// element must be covered exactly once. Tensors in files without slice metadata are taken whole.
Result<std::vector<NamedTensor>> AssembleTensors(
    const std::vector<const ckpt::SafetensorsFile*>& files);

}  // namespace tenax::model
