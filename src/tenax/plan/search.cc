#include "tenax/plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <tuple>

namespace tenax::plan {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> lo, hi;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    lo.push_back(d);
    if (d != n / d) hi.push_back(n / d);
  }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

// Smallest chunk of a sequence context parallelism may leave on a GPU: below it the all-gathers'
// latency dominates and the causal balancing (2 chunks per rank) stops making sense.
constexpr int64_t kMinContextChunk = 256;
// Virtual stages beyond this add sends without shrinking the bubble much.
constexpr int64_t kMaxVirtualStages = 16;

// Orders candidates: faster first; ties broken by less memory, then by name for determinism.
bool Faster(const Candidate& a, const Candidate& b) {
  if (a.time.step != b.time.step) return a.time.step < b.time.step;
  if (a.memory.total() != b.memory.total()) return a.memory.total() < b.memory.total();
  return LayoutName(a.layout) < LayoutName(b.layout);
}

void KeepBest(std::vector<Candidate>* best, size_t k, Candidate c) {
  if (best->size() >= k && !Faster(c, best->back())) return;
  auto it = std::upper_bound(best->begin(), best->end(), c, Faster);
  best->insert(it, std::move(c));
  if (best->size() > k) best->pop_back();
}

}  // namespace

std::string LayoutProblem(const Workload& w, const HardwareProfile& hw, const Layout& l) {
  const ModelSpec& m = w.model;
  if (l.tp < 1 || l.cp < 1 || l.pp < 1 || l.vpp < 1 || l.dp_shard < 1 || l.dp_replicate < 1 ||
      l.micro_batch < 1 || l.micro_batches < 1) {
    return "every axis and batch size must be >= 1";
  }
  if (std::string p = TensorParallelProblem(m, l.tp); !p.empty()) return p;
  if (l.cp > 1 && (w.seq_len % (2 * l.cp) != 0 || w.seq_len / l.cp < kMinContextChunk)) {
    return fmt::format("seq_len ({}) must split into 2 x cp ({}) chunks of >= {} tokens", w.seq_len,
                       l.cp, kMinContextChunk / 2);
  }
  if (l.pp > m.n_layers) return fmt::format("pp ({}) > n_layers ({})", l.pp, m.n_layers);
  if (l.pp * l.vpp > m.n_layers) {
    return fmt::format("pp ({}) x v ({}) > n_layers ({}): a virtual stage would be empty", l.pp,
                       l.vpp, m.n_layers);
  }
  if (l.pp == 1 && l.vpp > 1) return "virtual stages need pp > 1";
  if (l.vpp > 1 && l.micro_batches < l.pp) {
    return fmt::format("interleaved 1F1B needs micro-batches ({}) >= pp ({})", l.micro_batches,
                       l.pp);
  }
  if (l.dp() * l.micro_batch * l.micro_batches != w.sequences()) {
    return fmt::format(
        "dp ({}) x micro-batch ({}) x micro-batches ({}) = {} != sequences per step "
        "({} = {} tokens / {})",
        l.dp(), l.micro_batch, l.micro_batches, l.dp() * l.micro_batch * l.micro_batches,
        w.sequences(), w.global_batch_tokens, w.seq_len);
  }
  if (l.fp8 && hw.peak_fp8 <= 0) return hw.name + " has no fp8 tensor cores (peak_fp8_tflops = 0)";
  return "";
}

Result<Candidate> EvaluateLayout(const Workload& w, const HardwareProfile& hw, const Layout& l) {
  if (std::string p = LayoutProblem(w, hw, l); !p.empty()) {
    return InvalidArgument(fmt::format("layout {} is invalid: {}", LayoutName(l), p));
  }
  Candidate c;
  c.layout = l;
  c.time = EstimateStepTime(w, hw, l);
  c.memory = EstimateMemory(w, hw, l);
  return c;
}

Result<SearchResult> SearchLayouts(const Workload& w, const HardwareProfile& hw,
                                   const SearchOptions& o) {
  if (o.gpus < 1) return InvalidArgument(fmt::format("--gpus = {} must be >= 1", o.gpus));
  const auto t0 = std::chrono::steady_clock::now();
  const ModelSpec& m = w.model;
  const LayoutConstraints& fix = o.fix;
  const int64_t seqs = w.sequences();
  const size_t k = static_cast<size_t>(std::max(1, o.top_k));
  SearchResult r;
  auto pinned = [](const auto& pin, int64_t v) { return !pin || *pin == v; };

  std::map<std::tuple<int64_t, int64_t, int64_t, int, bool>, MicroBatchCost> cache;
  for (int64_t tp : Divisors(o.gpus)) {
    if (!pinned(fix.tp, tp)) continue;
    if (tp > m.n_heads || !TensorParallelProblem(m, tp).empty()) {
      ++r.dropped["tensor parallelism does not divide the heads / ffn"];
      continue;
    }
    for (int64_t cp : Divisors(o.gpus / tp)) {
      if (!pinned(fix.cp, cp)) continue;
      if (cp > 1 && (w.seq_len % (2 * cp) != 0 || w.seq_len / cp < kMinContextChunk)) {
        ++r.dropped["context parallelism does not divide the sequence"];
        continue;
      }
      for (int64_t pp : Divisors(o.gpus / (tp * cp))) {
        if (!pinned(fix.pp, pp)) continue;
        if (pp > m.n_layers) {
          ++r.dropped["more pipeline stages than layers"];
          continue;
        }
        const int64_t dp = o.gpus / (tp * cp * pp);
        if (!pinned(fix.dp, dp)) continue;
        if (seqs % dp != 0) {
          ++r.dropped["data parallelism does not divide the batch's sequences"];
          continue;
        }
        // Virtual-stage counts that keep the v = 1 layer balance (126 layers on 16 stages: 1, 2
        // and 4 give 8 layers per rank; 3 would give 9).
        std::vector<int64_t> vpps = {1};
        const int64_t base_load = CeilDiv(m.n_layers, pp);
        for (int64_t v = 2; pp > 1 && v <= kMaxVirtualStages && pp * v <= m.n_layers; ++v) {
          if (v * CeilDiv(m.n_layers, pp * v) == base_load || (fix.vpp && *fix.vpp == v)) {
            vpps.push_back(v);
          }
        }
        for (int64_t mbs : Divisors(seqs / dp)) {
          if (!pinned(fix.micro_batch, mbs)) continue;
          const int64_t micro_batches = seqs / dp / mbs;
          for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            if (fix.recompute && *fix.recompute != rc) continue;
            for (bool fp8 : {false, true}) {
              if (fix.fp8 && *fix.fp8 != fp8) continue;
              if (fp8 && hw.peak_fp8 <= 0) continue;
              auto key = std::make_tuple(tp, cp, mbs, static_cast<int>(rc), fp8);
              auto it = cache.find(key);
              if (it == cache.end()) {
                it = cache.emplace(key, EstimateMicroBatch(w, hw, tp, cp, mbs, rc, fp8)).first;
              }
              const MicroBatchCost& mb = it->second;
              for (int64_t v : vpps) {
                if (!pinned(fix.vpp, v)) continue;
                if (v > 1 && micro_batches < pp) {
                  ++r.dropped["interleaving needs micro-batches >= pp"];
                  continue;
                }
                for (int64_t ds : Divisors(dp)) {
                  if (!pinned(fix.dp_shard, ds) || !pinned(fix.dp_replicate, dp / ds)) continue;
                  for (bool reshard : {false, true}) {
                    if (ds == 1 && !reshard) continue;  // nothing to reshard
                    if (ds > 1 && fix.reshard && *fix.reshard != reshard) continue;
                    Layout l;
                    l.tp = tp;
                    l.cp = cp;
                    l.pp = pp;
                    l.vpp = v;
                    l.dp_shard = ds;
                    l.dp_replicate = dp / ds;
                    l.micro_batch = mbs;
                    l.micro_batches = micro_batches;
                    l.recompute = rc;
                    l.fp8 = fp8;
                    l.reshard = reshard;
                    Candidate c;
                    c.layout = l;
                    c.memory = EstimateMemory(w, hw, l);
                    c.time = EstimateStepTime(w, hw, l, mb);
                    ++r.evaluated;
                    if (c.memory.total() > hw.hbm_bytes) {
                      ++r.dropped["does not fit in GPU memory"];
                      if (r.leanest_not_fitting.empty() ||
                          c.memory.total() < r.leanest_not_fitting[0].memory.total()) {
                        r.leanest_not_fitting = {std::move(c)};
                      }
                      continue;
                    }
                    ++r.fitting;
                    KeepBest(&r.best, k, std::move(c));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tenax::plan
