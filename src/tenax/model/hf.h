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

#include <string>

#include "tenax/core/status.h"

namespace tenax::model {

// Writes `hf_dir` from the tenax checkpoint at `checkpoint` (step or checkpoint folder).
// dtype: "float32" (default, exact) or "bfloat16".
Status ExportHf(const std::string& checkpoint, const std::string& hf_dir,
                const std::string& dtype = "float32");
// Reads `hf_dir` and writes a weights-only tenax checkpoint (step 0) into folder `out`.
Status ImportHf(const std::string& hf_dir, const std::string& out);

}  // namespace tenax::model
