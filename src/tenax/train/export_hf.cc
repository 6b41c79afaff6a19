#include "tenax/train/export_hf.h"

#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/data/hf_tokenizer_files.h"
#include "tenax/model/hf.h"
#include "tenax/model/model_checkpoint.h"

namespace tenax::train {
Status ExportCheckpointToHf(const ExportHfRequest& r) {
  model::HfExportOptions o;
  o.dtype = r.dtype;
  TENAX_ASSIGN_OR_RETURN(o.max_shard_bytes, model::ParseByteSize(r.max_shard_size));
  TENAX_ASSIGN_OR_RETURN(model::ModelCheckpoint ckpt, model::LoadModelCheckpoint(r.checkpoint));
  const std::string spec = r.tokenizer == "none"  ? ""
                           : !r.tokenizer.empty() ? r.tokenizer
                                                  : ckpt.train_state.TokenizerSpec();
  if (spec.empty()) {
    log::Info("{}", r.tokenizer == "none"
                        ? "--tokenizer none: exporting without tokenizer files"
                        : "the checkpoint does not name a tokenizer (its data were synthetic or "
                          "token files); exporting without tokenizer files (pass --tokenizer "
                          "SPEC to include one)");
  } else {
    Result<data::HfTokenizerFiles> files = data::MakeHfTokenizerFiles(spec, ckpt.spec.max_seq_len);
    if (!files.ok()) {
      return Status(files.status().code(),
                    fmt::format("the tokenizer {} of {}: {}; pass --tokenizer SPEC where its file "
                                "is now, or --tokenizer none to export the model alone",
                                spec, ckpt.dir, files.status().message()));
    }
    for (const std::optional<uint32_t>& id : {files->bos, files->eos}) {
      if (id && static_cast<int64_t>(*id) >= ckpt.spec.vocab_size) {
        return InvalidArgument(fmt::format(
            "the tokenizer {} has special token id {}, outside the model's vocabulary of {}: it "
            "is not the tokenizer this model was trained with; pass the right one with "
            "--tokenizer SPEC, or --tokenizer none",
            spec, *id, ckpt.spec.vocab_size));
      }
    }
    if (files->files.empty()) log::Info("exporting without tokenizer files: {}", files->note);
    o.extra_files = std::move(files->files);
    if (files->bos) o.bos_id = *files->bos;
    if (files->eos) o.eos_id = *files->eos;
  }
  return model::ExportHf(ckpt, r.out, o);
}

}  // namespace tenax::train
