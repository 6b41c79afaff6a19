// The device mesh: how `world` ranks are laid out along the parallelism axes, and the checks that
// reject impossible layouts at start-up with a message naming every factor (torchtitan's habit).
// Axis order, outermost first: data_parallel_replicate, data_parallel_shard, pipeline, tensor.
// Tensor parallel is innermost so its ranks are neighbours (same node, fastest links).
// Pure arithmetic; no communication happens here.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax::parallel {

enum class Axis { kReplicate = 0, kShard = 1, kPipeline = 2, kTensor = 3 };
const char* AxisName(Axis axis);

class Mesh {
 public:
  // Resolves data_parallel_shard = -1 and validates the layout against the model and batch.
  static Result<Mesh> Create(const ParallelismOptions& options, int world,
                             const ModelSpec& model, const TrainingOptions& training);

  int world() const { return world_; }
  int degree(Axis a) const { return degrees_[static_cast<int>(a)]; }
  // Data-parallel degree: replicas x shards (ranks that see different data).
  int dp() const { return degree(Axis::kReplicate) * degree(Axis::kShard); }
  int coord(int rank, Axis a) const;
  // Index of `rank` among the data-parallel ranks (which slice of the global batch it reads).
  int dp_index(int rank) const;
  // Ranks that differ from `rank` only along `axis`, in axis order (a process group).
  std::vector<int> GroupOf(int rank, Axis axis) const;
  std::string Describe() const;  // "dp_replicate 2 x dp_shard 2 x pp 1 x tp 1"

 private:
  int world_ = 1;
  std::array<int, 4> degrees_{1, 1, 1, 1};
};

}  // namespace tenax::parallel
