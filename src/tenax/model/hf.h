// Hugging Face interop: a Llama checkpoint folder as transformers writes it (config.json +
// model.safetensors, or sharded model-0000k-of-0000n.safetensors with model.safetensors.index.json)
// <-> a tenax weights checkpoint.
//
// Names: model.embed_tokens.weight <-> tok_embeddings.weight, model.layers.{i}.self_attn.
// {q,k,v,o}_proj.weight <-> layers.{i}.attention.w{q,k,v,o}.weight, mlp.{gate,down,up}_proj <->
// feed_forward.w{1,2,3}, input_layernorm / post_attention_layernorm <-> attention_norm / ffn_norm,
// model.norm <-> norm, lm_head <-> output (absent when tie_word_embeddings).
// Mixtral (MixtralForCausalLM, model_type "mixtral"): the attention as above, and per layer
// block_sparse_moe.gate.weight <-> layers.{i}.moe.router.weight, block_sparse_moe.experts.{e}.
// w{1,2,3}.weight <-> layers.{i}.moe.experts.{e}.w{1,2,3}.weight (experts by global index).
// MoE models export only in Mixtral's shape (every layer MoE, softmax router, no shared experts).
// RoPE layout: tenax (like Meta's release) rotates interleaved pairs (2i, 2i+1) of each head; HF
// rotates (i, i + D/2). Export permutes the rows of wq and wk within each head from interleaved
// to half-split order; import applies the inverse, so import(export(x)) == x bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/core/fs.h"
#include "tenax/core/status.h"
#include "tenax/model/model_checkpoint.h"

namespace tenax::model {

// The folder ExportHf writes (what transformers' from_pretrained and AutoTokenizer load as is):
//   config.json                       LlamaConfig, with torch_dtype and bos/eos token ids
//   generation_config.json            bos/eos ids and sampling defaults (tenax generate's)
//   model.safetensors                 all weights, when they fit in max_shard_bytes; otherwise
//   model-0000K-of-0000N.safetensors  consecutive tensors (in the model's order) up to
//   + model.safetensors.index.json    max_shard_bytes each (a larger tensor goes alone), and the
//                                     index: {"metadata": {"total_size": bytes}, "weight_map":
//                                     {name: file}} (transformers' save_pretrained layout)
//   extra_files                       e.g. the tokenizer's (data/hf_tokenizer_files.h)
// Atomic: everything is written into a sibling folder OUT.partial-PID and renamed to OUT last, so
// a crash leaves no folder named OUT, only a .partial one. OUT must not exist or be empty.
struct HfExportOptions {
  std::string dtype = "float32";                   // float32 (exact) | bfloat16
  int64_t max_shard_bytes = 5000000000;            // transformers' default max_shard_size, "5GB"
  std::map<std::string, std::string> extra_files;  // name -> contents
  std::optional<int64_t> bos_id;
  std::optional<int64_t> eos_id;
};

// "5GB" (10^9), "500MB", "2GiB" (2^30), "1048576" (bytes) -> bytes; for --max-shard-size.
Result<int64_t> ParseByteSize(const std::string& text);

// `fs`: the filesystem seam (tests crash it at every step to check the folder's atomicity).
Status ExportHf(const ModelCheckpoint& checkpoint, const std::string& hf_dir,
                const HfExportOptions& options, FileSystem& fs = LocalFs());
// Loads the tenax checkpoint at `checkpoint` (step or checkpoint folder) and exports it.
Status ExportHf(const std::string& checkpoint, const std::string& hf_dir,
                const HfExportOptions& options = {});

// A Hugging Face Llama folder read into tenax's form: the shape from config.json, the weights
// (model.safetensors or the shards its index names) under tenax names in fp32 with the RoPE rows
// of wq/wk back in interleaved order, and the special token ids (generation_config.json first,
// then config.json; eos_token_id may be one id or a list).
struct HfModel {
  ModelSpec spec;
  std::vector<NamedTensor> params;
  std::optional<int64_t> bos_id;
  std::vector<int64_t> eos_ids;
};
// A NaN or infinite weight is refused with an error naming the tensor and its file (a damaged or
// diverged export), unless `allow_nonfinite`.
struct HfReadOptions {
  bool allow_nonfinite = false;
};
Result<HfModel> ReadHf(const std::string& hf_dir, const HfReadOptions& options = {});

// Reads `hf_dir` and writes a weights-only tenax checkpoint (step 0) into folder `out`.
Status ImportHf(const std::string& hf_dir, const std::string& out,
                const HfReadOptions& options = {});

}  // namespace tenax::model
