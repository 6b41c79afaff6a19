#include "tenax/parallel/context_layout.h"

#include <fmt/format.h>

namespace tenax::parallel {

std::vector<std::string> ContextParallelProblems(const ModelSpec& spec, int64_t cp, int64_t tp,
                                                 int64_t seq_len) {
  std::vector<std::string> problems;
  if (cp <= 1) return problems;
  if (seq_len % (2 * cp) != 0) {
    problems.push_back(fmt::format(
        "training.seq_len ({}) is not divisible by 2 * context_parallel ({}) = {} (every rank "
        "holds one chunk from the head and one from the tail of each sequence); make seq_len a "
        "multiple of {}",
        seq_len, cp, 2 * cp, 2 * cp * tp));
  } else if (tp > 1 && (seq_len / cp) % tp != 0) {
    problems.push_back(fmt::format(
        "training.seq_len / context_parallel = {} / {} = {} is not divisible by tensor_parallel "
        "({}) (sequence parallelism splits each rank's part of the sequence); make seq_len a "
        "multiple of {}",
        seq_len, cp, seq_len / cp, tp, 2 * cp * tp));
  }
  if (spec.moe.enabled()) {
    problems.push_back(fmt::format(
        "context_parallel ({}) with a mixture-of-experts model (model.n_experts = {}) is not "
        "supported yet; use context_parallel = 1 or a dense model",
        cp, spec.moe.n_experts));
  }
  return problems;
}

}  // namespace tenax::parallel
