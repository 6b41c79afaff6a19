// The device mesh: how `world` ranks are laid out along the parallelism axes, and the checks that
// reject impossible layouts at start-up with a message naming every factor (torchtitan's habit).
// Axis order, outermost first: data_parallel_replicate, data_parallel_shard, pipeline, context,
// tensor. Tensor parallel is innermost so its ranks are neighbours (same node, fastest links);
// context parallel (parallel/context_parallel.h) next to it, as in torchtitan: its ring passes
// every layer's keys and values.
// Context-parallel ranks read the same samples (each holds its own part of every sequence), so
// they are no data-parallel ranks for the loader (dp_index, dp); for the gradients they are:
// FSDP shards over data_parallel_shard x context (ShardGroupOf, torchtitan's dp_shard_cp).
// Expert parallelism is no axis of its own: it borrows from data_parallel_shard (torchtitan's
// dp_shard_in_ep), splitting each shard coordinate s into s = outer x ep + inner. Ranks that differ
// only in `inner` form an expert-parallel group (together they hold every expert once; inner is
// the fastest-varying part of s, so the all-to-all stays among the closest data-parallel ranks);
// ranks that differ only in `outer` hold the same experts and FSDP-shard them
// (torchtitan's dp_shard_mod_ep).
// Pure arithmetic; no communication happens here.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax::parallel {

enum class Axis { kReplicate = 0, kShard = 1, kPipeline = 2, kContext = 3, kTensor = 4 };
inline constexpr int kNumAxes = 5;
const char* AxisName(Axis axis);

class Mesh {
 public:
  // Resolves data_parallel_shard = -1 and validates the layout against the model and batch.
  static Result<Mesh> Create(const ParallelismOptions& options, int world, const ModelSpec& model,
                             const TrainingOptions& training);

  int world() const { return world_; }
  int degree(Axis a) const { return degrees_[static_cast<int>(a)]; }
  // Data-parallel degree: replicas x shards (ranks that see different data).
  int dp() const { return degree(Axis::kReplicate) * degree(Axis::kShard); }
  int ep() const { return ep_; }  // expert-parallel degree (divides the shard degree)
  int coord(int rank, Axis a) const;
  // Index of `rank` among the data-parallel ranks (which slice of the global batch it reads).
  int dp_index(int rank) const;
  // Ranks that differ from `rank` only along `axis`, in axis order (a process group).
  std::vector<int> GroupOf(int rank, Axis axis) const;
  // FSDP's shard group: the ranks that differ from `rank` only along data_parallel_shard and
  // context, shard-major (GroupOf(rank, kShard) when context parallelism is off).
  std::vector<int> ShardGroupOf(int rank) const;
  // The expert-parallel group of `rank`, and the ranks that shard the same experts.
  std::vector<int> ExpertGroupOf(int rank) const;
  std::vector<int> ExpertShardGroupOf(int rank) const;
  // "dp_replicate 2 x dp_shard 2 x pp 1 x tp 1"; "... x pp 1 x cp 2 x tp 1" with context
  // parallelism.
  std::string Describe() const;

 private:
  int Stride(Axis a) const;  // rank distance between neighbours along `a`

  int world_ = 1;
  std::array<int, kNumAxes> degrees_{1, 1, 1, 1, 1};
  int ep_ = 1;
};

}  // namespace tenax::parallel
