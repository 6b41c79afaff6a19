#include "tenax/train/evaluate.h"

#include <fmt/format.h>

#include "tenax/config/config.h"
#include "tenax/data/source.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/train/device.h"

namespace tenax::train {

at::Tensor BatchTensor(const std::vector<int64_t>& v, int64_t b, int64_t t, const at::Device& d) {
  return at::tensor(v, at::kLong).view({b, t}).to(d);
}

EvalResult EvaluateLoss(const LossFn& loss_fn, data::EvalLoader& loader, const at::Device& device) {
  at::NoGradGuard no_grad;
  loader.Reset();
  double sum = 0;
  int64_t tokens = 0;
  while (auto batch = loader.Next()) {
    const int64_t n = batch->batch * batch->seq_len;
    at::Tensor loss = loss_fn(BatchTensor(batch->inputs, batch->batch, batch->seq_len, device),
                              BatchTensor(batch->targets, batch->batch, batch->seq_len, device));
    sum += loss.item<double>() * static_cast<double>(n);
    tokens += n;
  }
  return EvalResult{tokens > 0 ? sum / static_cast<double>(tokens) : 0.0, tokens};
}

EvalResult EvaluateLoss(model::Llama& model, data::EvalLoader& loader,
                        at::ScalarType compute_dtype) {
  return EvaluateLoss(
      [&](const at::Tensor& x, const at::Tensor& y) { return model.Loss(x, y, compute_dtype); },
      loader, model.device());
}

Result<EvalResult> EvaluateCheckpoint(const std::string& checkpoint, const std::string& data_spec,
                                      int64_t max_tokens, const TrainingOptions& device_options,
                                      int64_t seq_len_override, int64_t batch_override) {
  TENAX_ASSIGN_OR_RETURN(model::ModelCheckpoint ckpt, model::LoadModelCheckpoint(checkpoint));
  // The checkpoint's own config supplies the data defaults (synthetic parameters, cache folder)
  // and the sequence length it was trained with.
  Config config;
  if (Result<Config> saved = ckpt.train_state.SavedConfig(); saved.ok()) config = *saved;
  if (max_tokens <= 0) max_tokens = config.metrics.eval_tokens;
  TENAX_ASSIGN_OR_RETURN(data::TokenStream stream, data::OpenEvalSpec(data_spec, config.data));
  if (stream.vocab_size() > static_cast<uint32_t>(ckpt.spec.vocab_size)) {
    return InvalidArgument(fmt::format(
        "the data '{}' has a vocabulary of {} tokens but the model's is {}; evaluate on data "
        "prepared with the model's tokenizer",
        data_spec, stream.vocab_size(), ckpt.spec.vocab_size));
  }
  if (seq_len_override > 0) config.training.seq_len = seq_len_override;
  if (batch_override > 0) config.training.local_batch_size = batch_override;
  const int64_t seq_len = std::min<int64_t>(config.training.seq_len, ckpt.spec.max_seq_len);
  TENAX_ASSIGN_OR_RETURN(DeviceInfo device, ResolveDevice(device_options));
  TENAX_ASSIGN_OR_RETURN(data::EvalLoader loader,
                         data::EvalLoader::Create(std::move(stream), seq_len,
                                                  config.training.local_batch_size, max_tokens));
  model::Llama model(ckpt.spec, 0, device.device);
  TENAX_RETURN_IF_ERROR(model.LoadParams(ckpt.params).WithContext(ckpt.dir));
  return EvaluateLoss(model, loader, device.compute_dtype);
}

}  // namespace tenax::train
