#include "tenax/plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tenax/plan/moe_model.h"

namespace tenax::plan {
namespace {

// A MicroBatchShape as a map key: EstimateMicroBatch's result depends on nothing else.
using MicroBatchKey = std::tuple<int64_t, int64_t, int64_t, Recompute, bool, int64_t>;
MicroBatchKey CacheKey(const MicroBatchShape& s) {
  return {s.tp, s.cp, s.micro_batch, s.recompute, s.fp8, s.ep};
}

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

// Divisors, each n computed once: the inner loops of the search ask for the same few numbers
// hundreds of thousands of times. References stay valid as the map grows (node-based).
class DivisorCache {
 public:
  const std::vector<int64_t>& operator()(int64_t n) {
    auto it = cache_.find(n);
    if (it == cache_.end()) it = cache_.emplace(n, Divisors(n)).first;
    return it->second;
  }

 private:
  std::unordered_map<int64_t, std::vector<int64_t>> cache_;
};

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

// The k fastest seen so far, as a heap with the slowest on top: each candidate costs O(log k)
// whatever --top is (a sorted vector cost O(k) per insertion: --top 100000 took 37 s).
class TopK {
 public:
  explicit TopK(size_t k) : k_(k) {}
  void Offer(Candidate c) {
    if (heap_.size() < k_) {
      heap_.push_back(std::move(c));
      std::push_heap(heap_.begin(), heap_.end(), Faster);
    } else if (Faster(c, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), Faster);
      heap_.back() = std::move(c);
      std::push_heap(heap_.begin(), heap_.end(), Faster);
    }
  }
  bool Full() const { return heap_.size() >= k_; }
  double Slowest() const { return heap_.front().time.step; }
  // Fastest first.
  std::vector<Candidate> Take() {
    std::sort_heap(heap_.begin(), heap_.end(), Faster);
    return std::move(heap_);
  }

 private:
  size_t k_;
  std::vector<Candidate> heap_;  // max-heap under Faster: heap_.front() is the slowest kept
};

// The first / last layer counts that best balance the pipeline ranks, given one layer's time and
// the embedding's and output's: the slowest rank's time is minimised over counts up to the even
// split's. Returns {0, 0} (the even split) when no uneven split is strictly faster.
std::pair<int64_t, int64_t> BalancedSplit(int64_t L, int64_t pp, const MicroBatchCost& mb) {
  const double layer = mb.layer.total();
  auto slowest = [&](int64_t a, int64_t b) {
    const double mid = pp > 2 ? static_cast<double>(CeilDiv(L - a - b, pp - 2)) : 0.0;
    return std::max({static_cast<double>(a) * layer + mb.embedding,
                     static_cast<double>(b) * layer + mb.output, mid * layer});
  };
  const int64_t even = CeilDiv(L, pp);
  double best = slowest(even, pp == 2 ? L - even : even);
  std::pair<int64_t, int64_t> out = {0, 0};
  for (int64_t a = std::max<int64_t>(1, even - 8); a <= even; ++a) {
    for (int64_t b = std::max<int64_t>(1, even - 8); b <= even; ++b) {
      if (pp == 2 && a + b != L) continue;
      if (pp > 2 && L - a - b < pp - 2) continue;
      const double t = slowest(a, b);
      if (t < best * (1 - 1e-9)) {
        best = t;
        out = {a, b};
      }
    }
  }
  return out;
}

// Virtual-stage counts worth trying on `pp` stages: those that keep the v = 1 layer balance (126
// layers on 16 stages: 1, 2 and 4 give 8 layers per rank; 3 would give 9), and a pinned one.
std::vector<int64_t> VirtualStageCounts(int64_t n_layers, int64_t pp,
                                        const std::optional<int64_t>& pinned_vpp) {
  std::vector<int64_t> vpps = {1};
  const int64_t base_load = CeilDiv(n_layers, pp);
  for (int64_t v = 2; pp > 1 && v <= kMaxVirtualStages && pp * v <= n_layers; ++v) {
    if (v * CeilDiv(n_layers, pp * v) == base_load || (pinned_vpp && *pinned_vpp == v)) {
      vpps.push_back(v);
    }
  }
  return vpps;
}

// Pipeline splits to try, as {first, last} layer counts ({0, 0}: the even split): the even one,
// and the balanced one when it is faster, or what --fix first= / last= pin.
std::vector<std::pair<int64_t, int64_t>> PipelineSplits(int64_t n_layers, int64_t pp,
                                                        const LayoutConstraints& fix,
                                                        const MicroBatchCost& mb) {
  if (pp == 1) return {{0, 0}};
  if (fix.first_layers || fix.last_layers) {
    return {{fix.first_layers.value_or(0), fix.last_layers.value_or(0)}};
  }
  std::vector<std::pair<int64_t, int64_t>> splits = {{0, 0}};
  const auto balanced = BalancedSplit(n_layers, pp, mb);
  if (balanced.first > 0) splits.push_back(balanced);
  return splits;
}

// What the search computes once per combination of the few factors it depends on: a
// micro-batch's cost (MicroBatchShape) and a layer's memory footprint (tp, recompute).
// References stay valid as the maps grow (node-based).
class CostCache {
 public:
  CostCache(const Workload& w, const HardwareProfile& hw) : w_(w), hw_(hw) {}
  const MicroBatchCost& MicroBatch(const MicroBatchShape& shape) {
    const auto key = CacheKey(shape);
    auto it = micro_batches_.find(key);
    if (it == micro_batches_.end()) {
      it = micro_batches_.emplace(key, EstimateMicroBatch(w_, hw_, shape)).first;
    }
    return it->second;
  }
  const LayerFootprint& FootprintOf(int64_t tp, Recompute rc) {
    const auto key = std::make_pair(tp, static_cast<int>(rc));
    auto it = footprints_.find(key);
    if (it == footprints_.end()) it = footprints_.emplace(key, Footprint(w_, tp, rc)).first;
    return it->second;
  }

 private:
  const Workload& w_;
  const HardwareProfile& hw_;
  std::map<MicroBatchKey, MicroBatchCost> micro_batches_;
  std::map<std::pair<int64_t, int>, LayerFootprint> footprints_;
};

// One complete layout's turn: rejected by --accept, costed for memory and, when it does not fit,
// kept if it is the leanest such; when it fits and its compute and bubble alone do not already
// make it slower than the k-th best (and, for MoE models, than the best of its ep), costed in
// full and offered to the top k.
void Consider(const Workload& w, const HardwareProfile& hw, const SearchOptions& o, const Layout& l,
              const LayerFootprint& footprint, const MicroBatchCost& mb, SearchResult* r,
              TopK* best) {
  if (o.accept && !o.accept(l)) {
    ++r->dropped[o.reject_reason];
    return;
  }
  Candidate c;
  c.layout = l;
  c.memory = EstimateMemory(w, hw, l, footprint);
  ++r->evaluated;
  if (c.memory.total() > hw.hbm_bytes) {
    ++r->dropped[kDoesNotFitReason];
    if (r->leanest_not_fitting.empty() ||
        c.memory.total() < r->leanest_not_fitting[0].memory.total()) {
      c.time = EstimateStepTime(w, hw, l, mb);
      r->leanest_not_fitting = {std::move(c)};
    }
    return;
  }
  ++r->fitting;
  EstimatePipeline(w, l, mb, &c.time);
  const double bound = c.time.compute + c.time.bubble;
  auto per_ep = r->best_per_ep.find(l.ep);
  const bool ep_done =
      !IsMoe(w) || (per_ep != r->best_per_ep.end() && bound > per_ep->second.time.step);
  if (best->Full() && bound > best->Slowest() && ep_done) return;
  c.time = EstimateStepTime(w, hw, l, mb);
  if (IsMoe(w) && (per_ep == r->best_per_ep.end() || c.time.step < per_ep->second.time.step)) {
    r->best_per_ep[l.ep] = c;
  }
  best->Offer(std::move(c));
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
  if (std::string p = StageSplitProblem(m.n_layers, l); !p.empty()) return p;
  if (l.cp > 1 && w.sw.attention == AttentionKind::kMaterialized) {
    return "context parallelism needs a flash attention kernel (--attention flash2 or flash3)";
  }
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
  return ExpertParallelProblem(w, l);
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
  SearchResult r;
  TopK best(static_cast<size_t>(std::max(1, o.top_k)));
  auto pinned = [](const auto& pin, int64_t v) { return !pin || *pin == v; };
  CostCache costs(w, hw);
  DivisorCache divisors;
  // The axes from the outside in; each level drops what cannot work, counting why, before the
  // levels below it multiply the choices.
  for (int64_t tp : divisors(o.gpus)) {
    if (!pinned(fix.tp, tp)) continue;
    if (tp > m.n_heads || !TensorParallelProblem(m, tp).empty()) {
      ++r.dropped["tensor parallelism does not divide the heads / ffn"];
      continue;
    }
    for (int64_t cp : divisors(o.gpus / tp)) {
      if (!pinned(fix.cp, cp)) continue;
      if (cp > 1 && w.sw.attention == AttentionKind::kMaterialized) {
        ++r.dropped["context parallelism needs flash attention"];
        continue;
      }
      if (cp > 1 && (w.seq_len % (2 * cp) != 0 || w.seq_len / cp < kMinContextChunk)) {
        ++r.dropped["context parallelism does not divide the sequence"];
        continue;
      }
      for (int64_t pp : divisors(o.gpus / (tp * cp))) {
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
        const std::vector<int64_t> vpps = VirtualStageCounts(m.n_layers, pp, fix.vpp);
        for (int64_t mbs : divisors(seqs / dp)) {
          if (!pinned(fix.micro_batch, mbs)) continue;
          const int64_t micro_batches = seqs / dp / mbs;
          for (Recompute rc : kAllRecompute) {
            if (fix.recompute && *fix.recompute != rc) continue;
            for (bool fp8 : {false, true}) {
              if (fix.fp8 && *fix.fp8 != fp8) continue;
              if (fp8 && hw.peak_fp8 <= 0) continue;
              MicroBatchShape shape;
              shape.tp = tp;
              shape.cp = cp;
              shape.micro_batch = mbs;
              shape.recompute = rc;
              shape.fp8 = fp8;
              const MicroBatchCost& mb = costs.MicroBatch(shape);  // ep = 1
              const LayerFootprint& footprint = costs.FootprintOf(tp, rc);
              const auto splits = PipelineSplits(m.n_layers, pp, fix, mb);
              for (int64_t v : vpps) {
                if (!pinned(fix.vpp, v)) continue;
                if (v > 1 && micro_batches < pp) {
                  ++r.dropped["interleaving needs micro-batches >= pp"];
                  continue;
                }
                for (const auto& [first, last] : splits) {
                  Layout probe;
                  probe.pp = pp;
                  probe.first_layers = first;
                  probe.last_layers = last;
                  if (!StageSplitProblem(m.n_layers, probe).empty()) {
                    ++r.dropped["the pinned pipeline split does not fit the layers"];
                    continue;
                  }
                  for (int64_t ds : divisors(dp)) {
                    if (!pinned(fix.dp_shard, ds) || !pinned(fix.dp_replicate, dp / ds)) continue;
                    for (int64_t ep : divisors(ds)) {
                      if (!pinned(fix.ep, ep)) continue;
                      if (ep > 1 && (!IsMoe(w) || m.moe.n_experts % ep != 0)) {
                        if (IsMoe(w)) ++r.dropped["expert parallelism does not divide the experts"];
                        continue;
                      }
                      MicroBatchShape with_ep = shape;
                      with_ep.ep = ep;
                      const MicroBatchCost& emb = ep == 1 ? mb : costs.MicroBatch(with_ep);
                      for (bool reshard : {false, true}) {
                        const bool sharded = ds * cp > 1;    // see Layout::shard
                        if (!sharded && !reshard) continue;  // nothing to reshard
                        if (sharded && fix.reshard && *fix.reshard != reshard) continue;
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
                        l.first_layers = first;
                        l.last_layers = last;
                        l.ep = ep;
                        Consider(w, hw, o, l, footprint, emb, &r, &best);
                        // The same layout under the zero-bubble schedules, where they run.
                        if (o.zero_bubble && v == 2 && first == 0 && last == 0 &&
                            micro_batches >= 2 * pp && m.n_layers % (2 * pp) == 0) {
                          for (PipeSchedule sch : {PipeSchedule::kZbv, PipeSchedule::kDualPipeV}) {
                            l.schedule = sch;
                            Consider(w, hw, o, l, footprint, emb, &r, &best);
                          }
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  r.best = best.Take();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tenax::plan
