#include "tenax/model/model_checkpoint.h"

#include <fmt/format.h>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/checkpoint/store.h"
#include "tenax/config/model_spec_json.h"
#include "tenax/core/fs.h"
#include "tenax/model/tensor_io.h"

namespace tenax::model {

std::string RankFileName(const std::string& stem, int rank, int ranks) {
  return fmt::format("{}-rank{:05d}-of-{:05d}.safetensors", stem, rank, ranks);
}

Result<std::vector<NamedTensor>> AssembleFromFiles(const std::map<std::string, std::string>& files,
                                                   const std::string& stem,
                                                   const std::string& dir) {
  std::vector<ckpt::SafetensorsFile> parsed;
  for (const auto& [name, bytes] : files) {
    const bool whole = name == stem + ".safetensors";
    const bool ranked = name.rfind(stem + "-rank", 0) == 0 && name.size() > 12 &&
                        name.substr(name.size() - 12) == ".safetensors";
    if (!whole && !ranked) continue;
    TENAX_ASSIGN_OR_RETURN(ckpt::SafetensorsFile f,
                           ckpt::SafetensorsFile::FromBytes(bytes, JoinPath(dir, name)));
    parsed.push_back(std::move(f));
  }
  std::vector<const ckpt::SafetensorsFile*> ptrs;
  for (const auto& f : parsed) ptrs.push_back(&f);
  return AssembleTensors(ptrs);
}

Result<ModelCheckpoint> LoadModelCheckpoint(const std::string& path) {
  TENAX_ASSIGN_OR_RETURN(auto where, ckpt::ResolveCheckpointPath(LocalFs(), path));
  ckpt::CheckpointStore store(LocalFs(), where.first);
  TENAX_ASSIGN_OR_RETURN(ckpt::LoadedCheckpoint loaded, store.Load(where.second));
  return ModelCheckpointFromFiles(std::move(loaded));
}

Result<ModelCheckpoint> ModelCheckpointFromFiles(ckpt::LoadedCheckpoint loaded) {
  ModelCheckpoint out;
  out.dir = loaded.dir;
  out.step = loaded.step;
  auto state_it = loaded.files.find(kTrainStateFile);
  if (state_it == loaded.files.end()) {
    return DataError(loaded.dir + " lacks " + kTrainStateFile + " or " + kModelFile +
                     "; it is not a tenax model checkpoint");
  }
  TENAX_ASSIGN_OR_RETURN(out.train_state, TrainState::Parse(state_it->second, loaded.dir));
  out.spec = out.train_state.model;
  TENAX_ASSIGN_OR_RETURN(out.params, AssembleFromFiles(loaded.files, "model", loaded.dir));
  if (out.params.empty()) {
    return DataError(loaded.dir +
                     " has no model weights (model.safetensors or model-rank*); it "
                     "is not a tenax model checkpoint");
  }
  out.files = std::move(loaded.files);
  return out;
}

Status WriteModelCheckpoint(const std::string& folder, int64_t step, const ModelSpec& spec,
                            const std::vector<NamedTensor>& params, TrainState state) {
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(folder));
  state.step = step;
  state.model = spec;
  ckpt::CheckpointStore store(LocalFs(), folder);
  return store.Save(step,
                    {{kModelFile, SerializeTensors(params, {{"format", "tenax"}})},
                     {kTrainStateFile, state.ToJson()}},
                    {{"world_size", 1}, {"sharding", "none"}}, {{"kind", "weights"}});
}

}  // namespace tenax::model
