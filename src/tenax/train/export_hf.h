// `tenax export-hf`: a tenax checkpoint -> a Hugging Face folder that transformers loads as is,
// with the tokenizer the run trained with (model/hf.h for the folder, data/hf_tokenizer_files.h
// for the tokenizer files). Which tokenizer: --tokenizer SPEC when given ("none": no tokenizer
// files), else the one the checkpoint records (train_state.json "tokenizer"), else, for a
// checkpoint written before that record, the config's data.tokenizer when data.source = "brown".
// Its BOS/EOS ids go into config.json and generation_config.json.
#pragma once

#include <string>

#include "tenax/core/status.h"

namespace tenax::train {

struct ExportHfRequest {
  std::string checkpoint;  // step folder or checkpoint folder
  std::string out;         // the folder to create
  std::string dtype = "float32";
  std::string max_shard_size = "5GB";
  std::string tokenizer;  // "" (as recorded) | "none" | a tokenizer spec
};

Status ExportCheckpointToHf(const ExportHfRequest& request);

}  // namespace tenax::train
