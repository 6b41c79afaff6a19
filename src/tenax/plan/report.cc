#include "tenax/plan/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "tenax/plan/moe_model.h"
#include "tenax/plan/support.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

std::string Ms(double s) { return fmt::format("{:.2f} ms", s * 1e3); }
std::string Sec(double s) { return fmt::format("{:.3f} s", s); }

// Parameter counts as model cards give them: "8.03B", "405.85B"; small models "4.19M" (a debug
// model is not "0.00B").
std::string ParamCount(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  return FormatThousands(n);
}

// Layouts the search looked at: those it costed, and those it dropped before costing them (every
// reason but memory, which is decided after costing).
int64_t LayoutsConsidered(const SearchResult& s) {
  int64_t n = s.evaluated;
  for (const auto& [reason, count] : s.dropped) {
    if (reason != kDoesNotFitReason) n += count;
  }
  return n;
}

std::string DropSummary(const SearchResult& s) {
  std::vector<std::pair<int64_t, std::string>> v;
  for (const auto& [reason, n] : s.dropped) v.emplace_back(n, reason);
  std::sort(v.rbegin(), v.rend());
  if (v.empty()) return " none";
  std::string out;
  for (const auto& [n, reason] : v) {
    out += fmt::format("\n    {:>9}  {}", FormatThousands(static_cast<double>(n)), reason);
  }
  return out;
}

std::optional<TrainingEstimate> Training(const PlanReport& r, const Candidate& c) {
  if (!r.tokens) return std::nullopt;
  return EstimateTraining(
      *r.tokens, c.time.tokens_per_s_per_gpu / (1 + SdcOverhead(c.time, r.sdc_check_interval)),
      r.gpus, r.price_per_gpu_hour, r.failures);
}

// How to run `c` with tenax train: the launch command and the TOML fragment.
std::string RunCommandText(const PlanReport& r, const Candidate& c) {
  const TrainSettings ts = TenaxTrainSettings(*r.workload, c.layout);
  const int64_t per_node = std::max<int64_t>(1, r.hardware->gpus_per_node);
  const int64_t nodes = (r.gpus + per_node - 1) / per_node;
  std::string launch =
      nodes > 1 ? fmt::format(
                      "tenax launch --nnodes {} --nproc-per-node {} --node-rank I --rdzv "
                      "HOST:PORT -- train",
                      nodes, per_node)
                : fmt::format("tenax launch --nproc-per-node {} -- train", r.gpus);
  std::string out =
      fmt::format("\n  run #1 with tenax train ({}):\n    {} {}", LayoutName(c.layout), launch,
                  r.config_arg.empty() ? "--config YOUR.toml" : r.config_arg);
  std::vector<std::string> sets = r.model_sets;
  sets.insert(sets.end(), ts.sets.begin(), ts.sets.end());
  for (const std::string& set : sets) out += " \\\n      --set " + set;
  out += "\n  or in the config:\n";
  std::string line;
  for (char ch : ts.toml) {
    if (ch == '\n') {
      out += (line.empty() ? "" : "    ") + line + "\n";
      line.clear();
    } else {
      line += ch;
    }
  }
  return out;
}

// The fastest layouts of the unrestricted search that beat `best` but need what tenax train
// lacks, with what that is.
std::string UnrunnableText(const PlanReport& r, const Candidate& best) {
  std::string out;
  std::vector<std::string> seen;  // one layout per set of missing features: the fastest
  for (const Candidate& c : r.unrunnable->best) {
    const TrainSupport ts = TenaxTrainSupport(*r.workload, c.layout);
    if (ts.runnable || c.time.step >= best.time.step || seen.size() == 4) continue;
    std::string why;
    for (const auto& m : ts.missing) why += (why.empty() ? "" : "; ") + m;
    if (std::find(seen.begin(), seen.end(), why) != seen.end()) continue;
    if (seen.empty())
      out +=
          "\n  faster layouts tenax train cannot run yet (the fastest per missing feature set):\n";
    seen.push_back(why);
    out += fmt::format("    {:<58} {:>9} {:>5.1f}% MFU ({:+.1f}%)  needs {}\n",
                       LayoutName(c.layout), FormatDuration(c.time.step), 100 * c.time.mfu,
                       100 * (best.time.step / c.time.step - 1), why);
  }
  return out;
}

}  // namespace

std::string PlanText(const PlanReport& r) {
  const Workload& w = *r.workload;
  const SearchResult& s = *r.search;
  const std::string params =
      IsMoe(w) ? fmt::format("{} parameters, {} active: {} of {} experts per token",
                             ParamCount(w.params.total), ParamCount(w.params.active),
                             w.model.moe.top_k, w.model.moe.n_experts)
               : fmt::format("{} parameters", ParamCount(w.params.total));
  std::string out = fmt::format(
      "tenax plan: {} ({}, {} model FLOP/token at seq_len {}) on {} x {}\n"
      "  batch {} sequences x {} = {} tokens per step; {} kernels, {} attention{}{}\n"
      "  searched {} layouts in {:.3f} s: {} costed, {} fit, dropped:{}\n",
      w.shape_name, params, FormatCount(w.flops_per_token), w.seq_len, r.gpus, r.hardware->name,
      w.sequences(), w.seq_len, FormatCount(static_cast<double>(w.global_batch_tokens)),
      KernelsName(w.sw.kernels), AttentionName(w.sw.attention),
      w.sw.dropout > 0 ? fmt::format(", dropout {:g}", w.sw.dropout) : "",
      w.sw.tp_overlap != TpOverlap::kNone
          ? fmt::format(", tp overlap {}", TpOverlapName(w.sw.tp_overlap))
          : "",
      FormatThousands(static_cast<double>(LayoutsConsidered(s))), s.seconds,
      FormatThousands(static_cast<double>(s.evaluated)),
      FormatThousands(static_cast<double>(s.fitting)), DropSummary(s));
  if (!r.batch_note.empty()) out += "  " + r.batch_note + "\n";
  if (r.runnable_only) {
    out += "  ranked: the layouts `tenax train` runs today (--all ranks every layout)\n";
  } else if (!r.all_reason.empty()) {
    out += "  ranked: every layout; tenax train cannot run " + r.all_reason + "\n";
  }
  if (s.best.empty()) {
    out += "\nno layout fits";
    if (!s.leanest_not_fitting.empty()) {
      const Candidate& c = s.leanest_not_fitting.front();
      out += fmt::format(": even the leanest, {}, needs {} per GPU of {}", LayoutName(c.layout),
                         FormatGiB(c.memory.total()), FormatGiB(r.hardware->hbm_bytes));
    }
    return out + ". Use more GPUs, a GPU with more memory, or a smaller batch per GPU.\n";
  }
  const bool days = r.tokens.has_value();
  const bool cost = days && r.price_per_gpu_hour > 0;
  const bool fail = days && r.failures.has_value();
  out += fmt::format("\n {:>2}  {:<58} {:>9} {:>11} {:>8} {:>6} {:>10} {:>5}", "#", "layout",
                     "step", "tokens/s", "TFLOP/s", "MFU", "memory", "tenax");
  if (days) out += fmt::format(" {:>9}", "days");
  if (fail) out += fmt::format(" {:>13}", "w/ failures");
  if (cost) out += fmt::format(" {:>14}", "cost");
  out += "\n";
  int rank = 0;
  for (const Candidate& c : s.best) {
    out += fmt::format(" {:>2}  {:<58} {:>9} {:>11} {:>8.0f} {:>5.1f}% {:>10} {:>5}", ++rank,
                       LayoutName(c.layout), FormatDuration(c.time.step),
                       FormatCount(c.time.tokens_per_s_per_gpu * static_cast<double>(r.gpus)),
                       c.time.tflops_per_gpu, 100 * c.time.mfu, FormatGiB(c.memory.total()),
                       TenaxTrainRuns(w, c.layout) ? "yes" : "no");
    if (auto t = Training(r, c)) {
      out += fmt::format(" {:>9.1f}", t->seconds / kDay);
      if (fail) out += fmt::format(" {:>13.1f}", t->wall_seconds / kDay);
      if (cost) out += fmt::format(" {:>14}", FormatMoney(fail ? t->wall_cost : t->cost));
    }
    out += "\n";
  }
  const Candidate& best = s.best.front();
  out += fmt::format(
      "\n  tokens/s is the whole cluster's; TFLOP/s and MFU count {} model FLOPs per token "
      "(6N + 12LHdS) against {:.0f} TFLOP/s bf16 peak (#1: {:.0f} hardware TFLOP/s with "
      "recomputation, {:.1f}% HFU). tenax: whether `tenax train` runs the layout today.\n",
      FormatCount(w.flops_per_token), r.hardware->peak_bf16 / 1e12,
      best.time.hardware_tflops_per_gpu, 100 * best.time.hfu);
  if (const TrainSupport ts = TenaxTrainSupport(w, best.layout); !ts.runnable) {
    std::string why;
    for (const auto& m : ts.missing) why += (why.empty() ? "" : "; ") + m;
    out += "  #1 needs what tenax train lacks: " + why + "\n";
  } else {
    out += RunCommandText(r, best);
  }
  if (r.unrunnable != nullptr) out += UnrunnableText(r, best);
  if (r.sdc_check_interval > 0) {
    out += fmt::format(
        "  silent-data-corruption checks every {} steps (resilience.sdc_check_interval): a replay "
        "of {} per check (#1's step less its exposed data-parallel traffic and optimizer), "
        "+{:.1f}% training time{}; one more replay per checkpoint. tenax train checks CPU "
        "ranks only so far (with NCCL the setting is refused: docs/resilience.md)\n",
        r.sdc_check_interval, FormatDuration(SdcReplaySeconds(best.time)),
        100 * SdcOverhead(best.time, r.sdc_check_interval),
        r.tokens ? " (in the days and cost above)" : "");
  }
  if (r.failures && !r.tokens) {
    const FailureSummary f = SummarizeFailures(*r.failures, r.gpus);
    out += fmt::format(
        "  failures ({}): job MTBF {}; checkpoint every {} of computation (Daly; Young {}) at {} "
        "stall, {} restart: {:.1f}% effective training time\n",
        r.failures->rate.text, FormatDuration(f.mtbf), FormatDuration(f.daly_interval),
        FormatDuration(f.young_interval), FormatDuration(r.failures->checkpoint_cost),
        FormatDuration(r.failures->restart_cost), 100 * f.effective);
  }
  if (auto t = Training(r, best)) {
    out += fmt::format("  {} tokens on layout #1: {:.1f} days, {} GPU-hours{}\n",
                       FormatCount(t->tokens), t->seconds / kDay, FormatThousands(t->gpu_hours),
                       cost ? ", " + FormatMoney(t->cost) : "");
    if (t->with_failures) {
      out += fmt::format(
          "  with failures ({}: job MTBF {}), checkpoint every {} (Daly) at {} stall, "
          "{} restart: {:.1f} days, {:.1f}% effective training time{}\n",
          r.failures->rate.text, FormatDuration(t->mtbf), FormatDuration(t->interval),
          FormatDuration(r.failures->checkpoint_cost), FormatDuration(r.failures->restart_cost),
          t->wall_seconds / kDay, 100 * t->effective,
          cost ? fmt::format(", {} ({} lost)", FormatMoney(t->wall_cost),
                             FormatMoney(t->wall_cost - t->cost))
               : "");
    }
  }
  return out;
}

nlohmann::json LayoutJson(const PlanReport& r, const Candidate& c) {
  const Workload& w = *r.workload;
  const Layout& l = c.layout;
  const StepTime& t = c.time;
  const LayerTime& lt = t.mb.layer;
  const MemoryBreakdown& m = c.memory;
  const TrainSupport ts = TenaxTrainSupport(w, l);
  nlohmann::json j = {
      {"name", LayoutName(l)},
      {"tp", l.tp},
      {"cp", l.cp},
      {"pp", l.pp},
      {"vpp", l.vpp},
      {"pipeline_schedule", PipeScheduleName(l.schedule)},
      {"dp_replicate", l.dp_replicate},
      {"dp_shard", l.dp_shard},
      {"ep", l.ep},
      {"micro_batch", l.micro_batch},
      {"micro_batches", l.micro_batches},
      {"recompute", RecomputeName(l.recompute)},
      {"fp8", l.fp8},
      {"reshard", l.reshard},
      {"stage_layers",
       {{"first", t.split.first}, {"middle", t.split.middle}, {"last", t.split.last}}},
      {"tenax_train",
       {{"runnable", ts.runnable},
        {"missing", ts.missing},
        {"set",
         ts.runnable ? nlohmann::json(TenaxTrainSettings(w, l).sets) : nlohmann::json::array()}}},
      {"step_s", t.step},
      {"sdc_check_interval", r.sdc_check_interval},
      {"sdc_overhead", SdcOverhead(t, r.sdc_check_interval)},
      {"tokens_per_s", t.tokens_per_s_per_gpu * static_cast<double>(r.gpus)},
      {"tokens_per_s_per_gpu", t.tokens_per_s_per_gpu},
      {"tflops_per_gpu", t.tflops_per_gpu},
      {"hardware_tflops_per_gpu", t.hardware_tflops_per_gpu},
      {"mfu", t.mfu},
      {"hfu", t.hfu},
      {"memory_bytes", m.total()},
      // One micro-batch through one layer on one GPU, forward + backward.
      {"layer_s",
       {{"matmul", lt.matmul},
        {"attention", lt.attention},
        {"elementwise", lt.elementwise},
        {"recompute", lt.recompute},
        {"tp_exposed", lt.tp_comm},
        {"tp_hidden", lt.tp_hidden},
        {"cp_exposed", lt.cp_comm},
        {"ep_all_to_all", lt.ep_comm},
        {"total", lt.total()}}},
      {"stage_s",
       {{"first", t.stage_first},
        {"middle", t.stage_middle},
        {"last", t.stage_last},
        {"output_layer", t.mb.output},
        {"embedding", t.mb.embedding}}},
      {"time_s",
       {{"compute", t.compute},
        {"tp_exposed", t.tp_comm},
        {"cp_exposed", t.cp_comm},
        {"ep_all_to_all", t.ep_comm},
        {"bubble", t.bubble},
        {"pp_exposed", t.pp_comm},
        {"pp_hidden", t.pp_hidden},
        {"dp_comm", t.dp_comm},
        {"dp_exposed", t.dp_exposed},
        {"dp_copies", t.dp_copies},
        {"interference", t.interference},
        {"optimizer", t.optimizer}}},
      {"memory",
       {{"params", m.params},
        {"optimizer", m.optimizer},
        {"grads", m.grads},
        {"activations", m.activations},
        {"logits", m.logits},
        {"workspace", m.workspace},
        {"buffers", m.buffers},
        {"reserved", m.reserved},
        {"expert_state", m.expert_state},
        {"stage", m.stage}}}};
  if (IsMoe(w)) {
    j["all_to_all_bytes_sent_per_step"] = 4.0 * t.mb.a2a_bytes_sent *
                                          static_cast<double>(l.micro_batches) *
                                          static_cast<double>(t.split.max_layers());
  }
  if (auto t2 = Training(r, c)) {
    nlohmann::json tj = {{"tokens", t2->tokens},
                         {"days", t2->seconds / kDay},
                         {"gpu_hours", t2->gpu_hours},
                         {"cost", t2->cost}};
    if (t2->with_failures) {
      tj["with_failures"] = {{"days", t2->wall_seconds / kDay},
                             {"effective", t2->effective},
                             {"mtbf_s", t2->mtbf},
                             {"checkpoint_interval_s", t2->interval},
                             {"cost", t2->wall_cost}};
    }
    j["training"] = tj;
  }
  return j;
}

nlohmann::json PlanJson(const PlanReport& r, bool with_layouts) {
  const Workload& w = *r.workload;
  const SearchResult& s = *r.search;
  nlohmann::json layouts = nlohmann::json::array();
  if (with_layouts) {
    for (const Candidate& c : s.best) layouts.push_back(LayoutJson(r, c));
  }
  const ModelSpec& ms = w.model;
  nlohmann::json out = {{"model",
                         {{"name", w.shape_name},
                          {"layers", ms.n_layers},
                          {"hidden", ms.dim},
                          {"heads", ms.n_heads},
                          {"kv_heads", ms.n_kv_heads},
                          {"ffn", ms.ffn_hidden_dim},
                          {"vocab", ms.vocab_size},
                          {"mlp", w.arch.gated_mlp ? "swiglu" : "gelu"},
                          {"norm", w.arch.layer_norm ? "layernorm" : "rmsnorm"},
                          {"biases", w.arch.biases},
                          {"learned_positions", w.arch.learned_positions},
                          {"params",
                           {{"total", w.params.total},
                            {"embedding", w.params.embedding},
                            {"per_layer", w.params.per_layer},
                            {"layers", w.params.layers},
                            {"output", w.params.output},
                            {"matmul", w.params.matmul},
                            {"experts", w.params.experts},
                            {"active", w.params.active}}}}},
                        {"software",
                         {{"kernels", KernelsName(w.sw.kernels)},
                          {"attention", AttentionName(w.sw.attention)},
                          {"dropout", w.sw.dropout},
                          {"sequence_parallel", w.sw.sequence_parallel},
                          {"tp_overlap", TpOverlapName(w.sw.tp_overlap)},
                          {"dp_overlap", w.sw.dp_overlap},
                          {"pp_overlap", w.sw.pp_overlap},
                          {"cp_attention", CpAttentionName(w.sw.cp_attention)},
                          {"complex_rotary", w.sw.complex_rotary}}},
                        {"gpus", r.gpus},
                        {"hardware", r.hardware->name},
                        {"seq_len", w.seq_len},
                        {"global_batch_tokens", w.global_batch_tokens},
                        {"flops_per_token", w.flops_per_token},
                        {"search",
                         {{"searched", LayoutsConsidered(s)},
                          {"evaluated", s.evaluated},
                          {"fitting", s.fitting},
                          {"dropped", s.dropped},
                          {"seconds", s.seconds}}},
                        {"layouts", layouts}};
  out["ranked"] = r.runnable_only ? "runnable" : "all";
  if (!r.all_reason.empty()) out["all_reason"] = r.all_reason;
  if (r.unrunnable != nullptr) {
    nlohmann::json faster = nlohmann::json::array();
    const double best = s.best.empty() ? 1e300 : s.best.front().time.step;
    for (const Candidate& c : r.unrunnable->best) {
      if (!TenaxTrainRuns(w, c.layout) && c.time.step < best) {
        faster.push_back(LayoutJson(r, c));
      }
    }
    out["faster_not_runnable"] = faster;
  }
  if (r.failures) {
    const FailureSummary f = SummarizeFailures(*r.failures, r.gpus);
    out["failures"] = {{"rate", r.failures->rate.text},
                       {"per_node_hour", r.failures->rate.per_node_hour},
                       {"mtbf_s", f.mtbf},
                       {"checkpoint_cost_s", r.failures->checkpoint_cost},
                       {"restart_cost_s", r.failures->restart_cost},
                       {"young_interval_s", f.young_interval},
                       {"daly_interval_s", f.daly_interval},
                       {"effective", f.effective}};
  }
  return out;
}

void WritePlanJson(const PlanReport& r, const std::string& explain, std::FILE* out) {
  nlohmann::json head = PlanJson(r, /*with_layouts=*/false);
  head.erase("layouts");
  if (!explain.empty()) head["explain"] = explain;
  std::string text = head.dump(2);
  text.pop_back();  // the closing brace: the layouts follow
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::fprintf(out, "%s,\n  \"layouts\": [", text.c_str());
  bool first = true;
  for (const Candidate& c : r.search->best) {
    std::fprintf(out, "%s\n    %s", first ? "" : ",", LayoutJson(r, c).dump().c_str());
    first = false;
  }
  std::fprintf(out, "%s]\n}\n", first ? "" : "\n  ");
}

std::string ExplainText(const Workload& w, const HardwareProfile& hw, const Candidate& c) {
  const Layout& l = c.layout;
  const StepTime& t = c.time;
  const LayerTime& lt = t.mb.layer;
  const MemoryBreakdown& m = c.memory;
  std::string out = fmt::format(
      "layout {}\n  {} GPUs = tp {} x cp {} x pp {} x dp {} (replicas {} x shards {}); {} "
      "virtual stage(s) per pipeline rank\n  micro-batch {} sequence(s) = {} tokens per GPU; {} "
      "micro-batches per step\n",
      LayoutName(l), l.gpus(), l.tp, l.cp, l.pp, l.dp(), l.dp_replicate, l.dp_shard, l.vpp,
      l.micro_batch, l.micro_batch * w.seq_len / l.cp, l.micro_batches);
  out += "\none micro-batch through one layer, forward + backward:\n";
  out += fmt::format(
      "  matmul        {:>10}   {} projections (forward, input and weight gradients) at the "
      "measured GEMM efficiency for their shapes, {:.0f}% sustained clock\n",
      Ms(lt.matmul), w.arch.gated_mlp ? 7 : 4, 100 * hw.sustained_clock);
  out += fmt::format("  attention     {:>10}   {} attention\n", Ms(lt.attention),
                     AttentionName(w.sw.attention));
  out += fmt::format("  elementwise   {:>10}   {} kernels at {:.0f}% of HBM bandwidth\n",
                     Ms(lt.elementwise), KernelsName(w.sw.kernels), 100 * hw.eff.memory_bound);
  out +=
      fmt::format("  recompute     {:>10}   ac={}\n", Ms(lt.recompute), RecomputeName(l.recompute));
  out += fmt::format("  tp traffic    {:>10}   exposed ({} hidden)\n", Ms(lt.tp_comm),
                     Ms(lt.tp_hidden));
  out += fmt::format("  cp traffic    {:>10}\n", Ms(lt.cp_comm));
  if (IsMoe(w)) {
    out += fmt::format(
        "  all-to-all    {:>10}   MoE token exchange over ep {} (2 forward, 2 backward; {} sent "
        "per all-to-all, mean over layers)\n",
        Ms(lt.ep_comm), l.ep, FormatBytes(t.mb.a2a_bytes_sent));
  }
  out += fmt::format("  = layer       {:>10}\n", Ms(lt.total()));
  out += fmt::format("  output layer and loss {}, embedding {}\n", Ms(t.mb.output),
                     Ms(t.mb.embedding));
  out += "\none step:\n";
  if (l.pp > 1) {
    out += fmt::format(
        "  pipeline ranks per micro-batch: first {} ({} layers + embedding), middle {} ({} "
        "layers), last {} ({} layers + output and loss)\n",
        Ms(t.stage_first), t.split.first, Ms(t.stage_middle), t.split.middle, Ms(t.stage_last),
        t.split.last);
  }
  out += fmt::format("  slowest pipeline rank: {} per micro-batch\n", Ms(t.stage));
  out +=
      fmt::format("  compute       {:>10}   {} micro-batches\n", Sec(t.compute), l.micro_batches);
  out += fmt::format("  bubble        {:>10}   the other ranks' work / v (fill and drain)\n",
                     Sec(t.bubble));
  out += fmt::format("  pp sends      {:>10}   exposed\n", Sec(t.pp_comm));
  out += fmt::format("  dp traffic    {:>10}   exposed of {} total\n", Sec(t.dp_exposed),
                     Sec(t.dp_comm));
  out += fmt::format("  fsdp copies   {:>10}\n", Sec(t.dp_copies));
  out +=
      fmt::format("  interference  {:>10}   hidden traffic slowing compute\n", Sec(t.interference));
  out += fmt::format("  optimizer     {:>10}\n", Sec(t.optimizer));
  out += fmt::format(
      "  = step        {:>10}   {:.1f} tokens/s/GPU, {:.0f} TFLOP/s/GPU, {:.1f}% MFU, "
      "{:.0f} hardware TFLOP/s\n",
      Sec(t.step), t.tokens_per_s_per_gpu, t.tflops_per_gpu, 100 * t.mfu,
      t.hardware_tflops_per_gpu);
  out += fmt::format("\nmemory per GPU ({} pipeline stage, {} layers held):\n", m.stage,
                     m.layers_held);
  out += fmt::format("  parameters    {:>10}   bf16 working copies\n", FormatGiB(m.params));
  out += fmt::format("  optimizer     {:>10}   fp32 master + AdamW m, v over {} shard(s)\n",
                     FormatGiB(m.optimizer), l.shard());
  out += fmt::format("  gradients     {:>10}   fp32\n", FormatGiB(m.grads));
  out += fmt::format("  activations   {:>10}   {} layer x micro-batch sets, ac={}\n",
                     FormatGiB(m.activations), m.inflight_sets, RecomputeName(l.recompute));
  out += fmt::format("  logits        {:>10}\n", FormatGiB(m.logits));
  out += fmt::format("  workspace     {:>10}   one layer's activations during backward\n",
                     FormatGiB(m.workspace));
  out += fmt::format("  buffers       {:>10}   tp / pp communication\n", FormatGiB(m.buffers));
  out += fmt::format("  reserved      {:>10}   CUDA context, NCCL, fragmentation\n",
                     FormatGiB(m.reserved));
  if (IsMoe(w)) {
    out += fmt::format(
        "  (experts      {:>10}   of optimizer + gradients: routed experts, {} per layer on this "
        "GPU (ep {}), FSDP over {})\n",
        FormatGiB(m.expert_state), w.model.moe.n_experts / l.ep, l.ep, l.shard() / l.ep);
  }
  out += fmt::format("  = total       {:>10}   of {}\n", FormatGiB(m.total()),
                     FormatGiB(hw.hbm_bytes));
  return out;
}

std::string ExpertChoiceText(const PlanReport& r) {
  const Workload& w = *r.workload;
  const SearchResult& s = *r.search;
  if (!IsMoe(w) || s.best_per_ep.empty()) return "";
  const MoeSpec& e = w.model.moe;
  std::string out = fmt::format(
      "expert parallelism: {} MoE layers of {} experts ({} per token), {:.2f}B of the {:.2f}B "
      "parameters in routed experts; the fastest fitting layout for each expert-parallel degree "
      "the search tried (ep divides dp_shard and {}):\n",
      w.model.n_moe_layers(), e.n_experts, e.top_k, w.params.experts / 1e9, w.params.total / 1e9,
      e.n_experts);
  out += fmt::format("  {:>4}  {:<58} {:>9} {:>11} {:>12} {:>11} {:>11} {:>10}\n", "ep", "layout",
                     "step", "tokens/s", "all-to-all", "a2a bytes", "dp traffic", "memory");
  const Candidate* chosen = s.best.empty() ? nullptr : &s.best.front();
  for (const auto& [ep, c] : s.best_per_ep) {
    const double a2a_bytes = 4.0 * c.time.mb.a2a_bytes_sent *
                             static_cast<double>(c.layout.micro_batches) *
                             static_cast<double>(c.time.split.max_layers());
    out += fmt::format("  {:>4}  {:<58} {:>9} {:>11} {:>12} {:>11} {:>11} {:>10}{}\n", ep,
                       LayoutName(c.layout), FormatDuration(c.time.step),
                       FormatCount(c.time.tokens_per_s_per_gpu * static_cast<double>(r.gpus)),
                       Sec(c.time.ep_comm), FormatBytes(a2a_bytes), Sec(c.time.dp_comm),
                       FormatGiB(c.memory.total()),
                       chosen && chosen->layout.ep == ep ? "  <- chosen" : "");
  }
  out +=
      "  all-to-all: the step's exposed token exchange (and the bytes one GPU sends); dp "
      "traffic: FSDP / DDP collectives (expert weights gathered and reduced over dp_shard / ep "
      "ranks only). A larger ep trades expert-weight traffic and the gathered window for token "
      "traffic, which leaves the node once ep x tp x cp exceeds a node.\n";
  if (chosen != nullptr) {
    const auto one = s.best_per_ep.find(1);
    if (one != s.best_per_ep.end() && chosen->layout.ep > 1) {
      out += fmt::format(
          "  chosen: ep {}, {:.1f}% faster than the best layout without expert parallelism\n",
          chosen->layout.ep, 100.0 * (one->second.time.step / chosen->time.step - 1.0));
    } else if (chosen->layout.ep == 1 && s.best_per_ep.size() > 1) {
      out += "  chosen: ep 1: every expert-parallel degree was slower\n";
    }
  }
  return out;
}

}  // namespace tenax::plan
