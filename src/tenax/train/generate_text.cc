#include "tenax/train/generate_text.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>

#include "tenax/config/config.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/data/tokenizer.h"
#include "tenax/model/hf.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/train/device.h"

namespace tenax::train {
namespace {

using Clock = std::chrono::steady_clock;

// A model ready to sample from, with what it says about its tokenizer.
struct Loaded {
  std::unique_ptr<model::Llama> model;
  std::string tokenizer;  // spec, "" when unknown
  std::vector<int64_t> eos_ids;
  std::optional<int64_t> bos_id;
  std::string where;
};

Result<Loaded> Load(const GenerateRequest& r, const at::Device& device) {
  Loaded out;
  std::vector<model::NamedTensor> params;
  ModelSpec spec;
  if (!r.hf_dir.empty()) {
    TENAX_ASSIGN_OR_RETURN(model::HfModel hf, model::ReadHf(r.hf_dir));
    spec = hf.spec;
    params = std::move(hf.params);
    out.eos_ids = hf.eos_ids;
    out.bos_id = hf.bos_id;
    if (LocalFs().Exists(JoinPath(r.hf_dir, "tokenizer.json"))) out.tokenizer = "hf:" + r.hf_dir;
    out.where = r.hf_dir;
  } else {
    TENAX_ASSIGN_OR_RETURN(model::ModelCheckpoint ckpt, model::LoadModelCheckpoint(r.checkpoint));
    spec = ckpt.spec;
    params = std::move(ckpt.params);
    const TrainState& s = ckpt.train_state;
    out.tokenizer = s.TokenizerSpec();
    if (s.tokenizer) {
      out.bos_id = s.tokenizer->bos_id;
      if (s.tokenizer->eos_id) out.eos_ids.push_back(*s.tokenizer->eos_id);
    }
    out.where = ckpt.dir;
  }
  out.model = std::make_unique<model::Llama>(spec, 0, device, model::Llama::Init::kOverwritten);
  TENAX_RETURN_IF_ERROR(out.model->LoadParams(params).WithContext(out.where));
  return out;
}

}  // namespace

size_t CompleteUtf8Prefix(const std::string& s) {
  // Look back at most 3 bytes for the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t need = c < 0x80             ? 1
                        : (c & 0xE0) == 0xC0 ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 1;
    return back < need ? n - back : n;
  }
  return n;  // only continuation bytes: invalid anyway, nothing to wait for
}

Result<GenerateResult> GenerateText(const GenerateRequest& r,
                                    const std::function<void(const std::string&)>& on_text) {
  if (r.checkpoint.empty() == r.hf_dir.empty()) {
    return InvalidArgument(
        "give exactly one of --checkpoint (a tenax checkpoint) and --hf (a "
        "Hugging Face folder)");
  }
  TrainingOptions device_options;
  device_options.device = r.device;
  TENAX_ASSIGN_OR_RETURN(DeviceInfo device, ResolveDevice(device_options));
  TENAX_ASSIGN_OR_RETURN(Loaded m, Load(r, device.device));
  const int64_t vocab = m.model->spec().vocab_size;

  const std::string spec = r.tokenizer.empty() ? m.tokenizer : r.tokenizer;
  std::unique_ptr<data::Tokenizer> tok;
  if (!spec.empty()) {
    Result<std::unique_ptr<data::Tokenizer>> made = data::MakeTokenizer(spec);
    if (!made.ok()) {
      return Status(made.status().code(),
                    fmt::format("the tokenizer {} of {}: {}; pass --tokenizer SPEC where its file "
                                "is now",
                                spec, m.where, made.status().message()));
    }
    tok = std::move(made).value();
    if (static_cast<int64_t>(tok->vocab_size()) > vocab) {
      log::Warn("the tokenizer {} has {} tokens but the model only {}: is it the model's?", spec,
                tok->vocab_size(), vocab);
    }
  }
  GenerateResult out;
  if (!r.prompt_ids.empty()) {
    out.prompt_ids = r.prompt_ids;
  } else {
    if (!tok) {
      return InvalidArgument(fmt::format(
          "{} does not name its tokenizer (it trained on synthetic data or token files); pass "
          "--tokenizer SPEC to encode the prompt, or --prompt-ids",
          m.where));
    }
    std::optional<uint32_t> start = tok->bos() ? tok->bos() : tok->eos();
    if (m.bos_id && !tok->bos()) start = static_cast<uint32_t>(*m.bos_id);
    if (r.add_bos && start) out.prompt_ids.push_back(*start);
    TENAX_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, tok->EncodeWithSpecialTokens(r.prompt));
    for (uint32_t id : ids) out.prompt_ids.push_back(id);
    if (out.prompt_ids.empty()) {
      return InvalidArgument(
          "the prompt is empty and the tokenizer has no BOS or EOS to start "
          "from; give a prompt");
    }
  }
  model::GenerateOptions o;
  o.max_new_tokens = r.max_new_tokens;
  o.sampling = r.sampling;
  o.use_cache = r.use_cache;
  o.compute_dtype = device.compute_dtype;
  if (r.stop_at_eos) {
    o.stop_ids = m.eos_ids;
    if (tok && tok->eos() &&
        std::find(o.stop_ids.begin(), o.stop_ids.end(), *tok->eos()) == o.stop_ids.end()) {
      o.stop_ids.push_back(*tok->eos());
    }
  }
  // Streaming: decode everything generated so far, print what is new and complete.
  std::vector<uint32_t> so_far;
  size_t printed = 0;
  std::optional<Clock::time_point> first;
  Clock::time_point last;
  Status decode_error;
  auto on_token = [&](int64_t id) {
    last = Clock::now();
    if (!first) first = last;
    if (!tok || !on_text || !decode_error.ok()) return;
    so_far.push_back(static_cast<uint32_t>(id));
    Result<std::string> text = tok->Decode(so_far);
    if (!text.ok()) {
      decode_error = text.status();
      return;
    }
    const size_t ready = CompleteUtf8Prefix(*text);
    if (ready > printed) {
      on_text(text->substr(printed, ready - printed));
      printed = ready;
    }
  };
  TENAX_ASSIGN_OR_RETURN(out.ids, model::Generate(*m.model, out.prompt_ids, o, on_token));
  TENAX_RETURN_IF_ERROR(decode_error);
  if (tok) {
    TENAX_ASSIGN_OR_RETURN(out.text,
                           tok->Decode(std::vector<uint32_t>(out.ids.begin(), out.ids.end())));
    if (on_text && out.text.size() > printed) on_text(out.text.substr(printed));
  }
  if (first && out.ids.size() > 1) {
    out.tokens_per_s = static_cast<double>(out.ids.size() - 1) /
                       std::chrono::duration<double>(last - *first).count();
  }
  return out;
}

}  // namespace tenax::train
