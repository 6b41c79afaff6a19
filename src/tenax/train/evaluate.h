// Validation loss: mean next-token cross-entropy (nats) over a fixed, unshuffled span of a token
// stream, so every evaluation of the same checkpoint sees the same tokens.
#pragma once

#include <functional>
#include <string>

#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/data/loader.h"
#include "tenax/model/llama.h"

namespace tenax::train {

struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;
};

// (B, T) int64 tensor on `device` from a row-major vector.
at::Tensor BatchTensor(const std::vector<int64_t>& values, int64_t batch, int64_t seq_len,
                       const at::Device& device);

// Runs `loader` from its start to its end with gradients off.
EvalResult EvaluateLoss(model::Llama& model, data::EvalLoader& loader,
                        at::ScalarType compute_dtype);
// Same with any loss function of (tokens, targets) (tensor-parallel models).
using LossFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
EvalResult EvaluateLoss(const LossFn& loss, data::EvalLoader& loader, const at::Device& device);

// `tenax eval`: loads a checkpoint and evaluates it on `data_spec` (see data/source.h) for up to
// `max_tokens` tokens (0: the checkpoint's metrics.eval_tokens, else 65536), in windows of
// `seq_len` tokens and batches of `batch_size` (0: the checkpoint's training.seq_len and
// local_batch_size, else the defaults; a checkpoint without a config, such as one made by
// import-hf, needs them to be evaluated like the run it came from).
Result<EvalResult> EvaluateCheckpoint(const std::string& checkpoint, const std::string& data_spec,
                                      int64_t max_tokens, const TrainingOptions& device_options,
                                      int64_t seq_len = 0, int64_t batch_size = 0);

}  // namespace tenax::train
