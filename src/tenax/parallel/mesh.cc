#include "tenax/parallel/mesh.h"

#include <fmt/format.h>

#include "tenax/parallel/context_layout.h"
#include "tenax/parallel/pipeline_schedule.h"

namespace tenax::parallel {

const char* AxisName(Axis a) {
  switch (a) {
    case Axis::kReplicate:
      return "data_parallel_replicate";
    case Axis::kShard:
      return "data_parallel_shard";
    case Axis::kPipeline:
      return "pipeline_parallel";
    case Axis::kContext:
      return "context_parallel";
    case Axis::kTensor:
      return "tensor_parallel";
  }
  return "?";
}

Result<Mesh> Mesh::Create(const ParallelismOptions& o, int world, const ModelSpec& model,
                          const TrainingOptions& training) {
  Mesh m;
  m.world_ = world;
  const int64_t rep = o.data_parallel_replicate, tp = o.tensor_parallel, pp = o.pipeline_parallel;
  const int64_t cp = o.context_parallel;
  // The context factor is named only when it is in use, so the messages of the other layouts
  // stay as they were.
  const std::string cp_factor = cp > 1 ? fmt::format(" * context_parallel({})", cp) : "";
  const int64_t shard = ResolvedDataParallelShard(o, world);
  if (o.data_parallel_shard == -1 && shard == 0) {
    return InvalidArgument(fmt::format(
        "cannot infer data_parallel_shard: world size {} is not divisible by "
        "data_parallel_replicate({}) * tensor_parallel({}) * pipeline_parallel({}){} = {}",
        world, rep, tp, pp, cp_factor, rep * tp * pp * cp));
  }
  if (rep * shard * tp * pp * cp != world) {
    return InvalidArgument(fmt::format(
        "[parallelism] data_parallel_replicate({}) * data_parallel_shard({}) * "
        "tensor_parallel({}) * pipeline_parallel({}){} = {} != world size {}; make the product "
        "equal the number of ranks (data_parallel_shard = -1 takes whatever is left)",
        rep, shard, tp, pp, cp_factor, rep * shard * tp * pp * cp, world));
  }
  std::vector<std::string> problems;
  if (model.n_heads % tp != 0) {
    problems.push_back(fmt::format("model.n_heads ({}) is not divisible by tensor_parallel ({})",
                                   model.n_heads, tp));
  }
  if (model.n_kv_heads % tp != 0) {
    problems.push_back(fmt::format("model.n_kv_heads ({}) is not divisible by tensor_parallel ({})",
                                   model.n_kv_heads, tp));
  }
  if (model.ffn_hidden_dim % tp != 0) {
    problems.push_back(
        fmt::format("model.ffn_hidden_dim ({}) is not divisible by tensor_parallel ({})",
                    model.ffn_hidden_dim, tp));
  }
  if (cp > 1) {
    for (std::string& p : ContextParallelProblems(model, cp, tp, training.seq_len)) {
      problems.push_back(std::move(p));
    }
  }
  if (tp > 1 && cp == 1 && training.seq_len % tp != 0) {
    problems.push_back(fmt::format(
        "training.seq_len ({}) is not divisible by tensor_parallel ({}) (sequence parallelism "
        "splits the sequence across the tensor-parallel ranks)",
        training.seq_len, tp));
  }
  const int64_t stages = pp * o.virtual_stages;
  if (model.n_layers % stages != 0) {
    problems.push_back(fmt::format(
        "model.n_layers ({}) is not divisible by pipeline_parallel ({}) * virtual_stages ({}) = {}",
        model.n_layers, pp, o.virtual_stages, stages));
  }
  // The schedule's own conditions (virtual stages, enough micro-batches), in its own words.
  if (pp > 1 || o.virtual_stages > 1) {
    Result<ScheduleKind> kind = ParseScheduleKind(o.pipeline_schedule);
    const Status st =
        kind.ok() ? BuildSchedule(*kind, static_cast<int>(pp), static_cast<int>(o.microbatches),
                                  static_cast<int>(o.virtual_stages))
                        .status()
                  : kind.status();
    if (!st.ok()) problems.push_back(st.message());
  }
  if (training.local_batch_size % o.microbatches != 0) {
    problems.push_back(
        fmt::format("training.local_batch_size ({}) is not divisible by microbatches ({})",
                    training.local_batch_size, o.microbatches));
  }
  const int64_t ep = o.expert_parallel;
  if (ep > 1) {
    if (!model.moe.enabled()) {
      problems.push_back(fmt::format(
          "expert_parallel ({}) needs a mixture-of-experts model (model.n_experts > 0)", ep));
    } else if (model.moe.n_experts % ep != 0) {
      problems.push_back(
          fmt::format("model.n_experts ({}) is not divisible by expert_parallel ({})",
                      model.moe.n_experts, ep));
    }
    if (shard % ep != 0) {
      problems.push_back(fmt::format(
          "data_parallel_shard ({}) is not divisible by expert_parallel ({}): expert parallelism "
          "borrows its ranks from data_parallel_shard (world {} = data_parallel_replicate({}) * "
          "data_parallel_shard({}) * pipeline_parallel({}) * tensor_parallel({}))",
          shard, ep, world, rep, shard, pp, tp));
    }
  }
  if (!problems.empty()) {
    std::string msg =
        fmt::format("the parallel layout {} x {} x {} x {}{}{} does not fit:", rep, shard, pp, tp,
                    cp > 1 ? fmt::format(" (context_parallel {})", cp) : "",
                    ep > 1 ? fmt::format(" (expert_parallel {})", ep) : "");
    for (const auto& p : problems) msg += "\n  - " + p;
    return InvalidArgument(msg);
  }
  m.degrees_ = {static_cast<int>(rep), static_cast<int>(shard), static_cast<int>(pp),
                static_cast<int>(cp), static_cast<int>(tp)};
  m.ep_ = static_cast<int>(ep);
  return m;
}

int Mesh::Stride(Axis a) const {
  int stride = 1;
  for (int i = kNumAxes - 1; i > static_cast<int>(a); --i) stride *= degrees_[i];
  return stride;
}

int Mesh::coord(int rank, Axis a) const {
  return (rank / Stride(a)) % degrees_[static_cast<int>(a)];
}

int Mesh::dp_index(int rank) const {
  return coord(rank, Axis::kReplicate) * degree(Axis::kShard) + coord(rank, Axis::kShard);
}

std::vector<int> Mesh::GroupOf(int rank, Axis a) const {
  const int stride = Stride(a);
  const int base = rank - coord(rank, a) * stride;
  std::vector<int> ranks;
  for (int k = 0; k < degree(a); ++k) ranks.push_back(base + k * stride);
  return ranks;
}

std::vector<int> Mesh::ShardGroupOf(int rank) const {
  std::vector<int> ranks;
  for (int s : GroupOf(rank, Axis::kShard)) {
    for (int c : GroupOf(s, Axis::kContext)) ranks.push_back(c);
  }
  return ranks;
}

std::string Mesh::Describe() const {
  return fmt::format("dp_replicate {} x dp_shard {} x pp {}{} x tp {}{}", degrees_[0], degrees_[1],
                     degrees_[2], degrees_[3] > 1 ? fmt::format(" x cp {}", degrees_[3]) : "",
                     degrees_[4],
                     ep_ > 1 ? fmt::format(" (expert_parallel {} within dp_shard)", ep_) : "");
}

std::vector<int> Mesh::ExpertGroupOf(int rank) const {
  // Shard coordinate s = outer * ep + inner: vary inner.
  const std::vector<int> shard = GroupOf(rank, Axis::kShard);
  const int s = coord(rank, Axis::kShard);
  const int base = s / ep_ * ep_;
  return std::vector<int>(shard.begin() + base, shard.begin() + base + ep_);
}

std::vector<int> Mesh::ExpertShardGroupOf(int rank) const {
  const std::vector<int> shard = GroupOf(rank, Axis::kShard);
  std::vector<int> out;
  for (size_t i = static_cast<size_t>(coord(rank, Axis::kShard) % ep_); i < shard.size();
       i += static_cast<size_t>(ep_)) {
    out.push_back(shard[i]);
  }
  return out;
}

}  // namespace tenax::parallel
