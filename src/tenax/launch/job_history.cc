#include "tenax/launch/job_history.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "tenax/etcd/client.h"
#include "tenax/launch/goodput.h"

namespace tenax::launch {
namespace {

using nlohmann::json;

// The records under `prefix` (stragglers, exit faults): JSON objects only.
std::vector<json> ObjectsUnder(etcd::EtcdClient& etcd, const std::string& prefix) {
  std::vector<json> out;
  Result<etcd::RangeResponse> rs = etcd.GetPrefix(prefix);
  if (!rs.ok()) return out;
  for (const etcd::KeyValue& kv : rs->kvs) {
    json x = json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (x.is_object()) out.push_back(std::move(x));
  }
  return out;
}

// Node 0's beats of a generation, rebuilt from its report: ready (resume step, run folder), then
// its last step with the step and checkpoint times.
void AddLeadBeats(const json& r, int64_t gen, double start_unix, Goodput* g) {
  if (r.value("ready_unix", -1.0) < 0) return;
  protocol::Beat ready;
  ready.generation = static_cast<int>(gen);
  ready.phase = protocol::Phase::kReady;
  ready.resume_step = r.value("resume_step", int64_t{0});
  ready.run_dir = r.value("run_dir", std::string());
  ready.wall_s = r.value("ready_unix", 0.0);
  g->LeadBeat(ready, ready.wall_s - start_unix, ready.wall_s);
  protocol::Beat last = ready;
  last.phase = protocol::Phase::kTrain;
  last.step = r.value("last_step", int64_t{0});
  last.steps_s = r.value("steps_s", 0.0);
  last.checkpoint_s = r.value("checkpoint_s", 0.0);
  last.tokens_per_s = r.value("tokens_per_s", 0.0);
  last.wall_s = r.value("last_step_unix", ready.wall_s);
  if (last.step > ready.resume_step) g->LeadBeat(last, last.wall_s - start_unix, last.wall_s);
}

// The lead among a generation's reports (GenerationHistory::lead_report): the lowest node rank
// whose report its planned agent wrote, else the lowest node rank's.
json LeadReport(const etcd::RangeResponse& reports, const std::string& prefix,
                const std::optional<rdzv::Plan>& plan) {
  json lead;
  std::pair<bool, int64_t> best{true, 0};  // (not the planned agent's, node rank): lowest wins
  bool any = false;
  for (const etcd::KeyValue& kv : reports.kvs) {
    const int64_t node = rdzv::ParseInt(kv.key.substr(prefix.size()), -1);
    json r = json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (node < 0 || !r.is_object()) continue;
    const bool planned = plan && node < static_cast<int64_t>(plan->nodes.size()) &&
                         r.value("agent", std::string()) == plan->nodes[static_cast<size_t>(node)];
    const std::pair<bool, int64_t> key{!planned, node};
    if (!any || key < best) {
      best = key;
      lead = std::move(r);
      any = true;
    }
  }
  return lead;
}

// The failure generation g ended by, from every node's report (rdzv::FirstFailure).
std::optional<FailureRecord> FailureOf(const std::vector<rdzv::FailureReport>& failures, int64_t g,
                                       double start_unix) {
  std::optional<rdzv::FailureReport> first = rdzv::FirstFailure(failures);
  if (!first) return std::nullopt;
  FailureRecord f;
  f.time_s = first->wall_s - start_unix;
  f.generation = static_cast<int>(g);
  f.rank = first->rank;
  f.node = first->node_rank;
  f.host = first->host;
  f.kind = first->kind;
  f.cause = first->cause;
  f.exit_code = first->code;
  if (first->kind == "node-lost" || first->kind == "partition") {
    // A lost node is known when its lease expires; its peers saw it go earlier (their
    // collectives broke): the earliest of those is when it failed.
    double failed = first->wall_s;
    for (const rdzv::FailureReport& r : failures) {
      if (r.secondary) failed = std::min(failed, r.wall_s);
    }
    f.detection_s = std::max(0.0, first->wall_s - failed);
  }
  return f;
}

}  // namespace

Result<std::vector<rdzv::FailureReport>> ReadFailureReports(etcd::EtcdClient& etcd,
                                                            const rdzv::Keys& keys, int64_t g) {
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse fs, etcd.GetPrefix(keys.failures(g)));
  std::vector<rdzv::FailureReport> reports;
  for (const etcd::KeyValue& kv : fs.kvs) {
    auto f = rdzv::FailureReport::FromJson(kv.value);
    if (f.ok()) reports.push_back(*f);  // a record of another version: not evidence
  }
  return reports;
}

Result<JobHistory> ReadJobHistory(etcd::EtcdClient& etcd, const rdzv::Keys& keys, int64_t current,
                                  double start_unix) {
  JobHistory h;
  h.start_unix = start_unix;
  bool any_read = false;
  for (int64_t gen = 0; gen <= current; ++gen) {
    Result<std::optional<etcd::KeyValue>> plan = etcd.Get(keys.plan(gen));
    any_read = any_read || plan.ok();
    if (!plan.ok() || !*plan) continue;  // never ran (or unreadable now)
    GenerationHistory gh;
    gh.generation = gen;
    if (Result<rdzv::Plan> p = rdzv::Plan::FromJson((*plan)->value); p.ok()) gh.plan = *p;
    if (Result<etcd::RangeResponse> reps = etcd.GetPrefix(keys.reports(gen)); reps.ok()) {
      gh.lead_report = LeadReport(*reps, keys.reports(gen), gh.plan);
    }
    gh.stragglers = ObjectsUnder(etcd, keys.stragglers(gen));
    gh.exit_faults = ObjectsUnder(etcd, keys.exit_faults(gen));
    if (Result<etcd::RangeResponse> live = etcd.GetPrefix(keys.live_recoveries(gen)); live.ok()) {
      for (const etcd::KeyValue& kv : live->kvs) {
        const json node = json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
        if (!node.is_array()) continue;
        // Under <node>/<agent>: the agent that ran the replacements.
        const std::string where = kv.key.substr(keys.live_recoveries(gen).size());
        const size_t slash = where.find('/');
        for (json x : node) {
          if (!x.is_object()) continue;
          if (slash != std::string::npos && !x.contains("agent"))
            x["agent"] = where.substr(slash + 1);
          gh.live_recoveries.push_back(std::move(x));
        }
      }
    }
    if (Result<etcd::RangeResponse> v = etcd.GetPrefix(keys.live_vacancies(gen)); v.ok()) {
      for (const etcd::KeyValue& kv : v->kvs) {
        if (auto r = rdzv::LiveVacancy::FromJson(kv.value); r.ok()) gh.live_vacancies.push_back(*r);
      }
    }
    if (Result<etcd::RangeResponse> c = etcd.GetPrefix(keys.live_claims(gen)); c.ok()) {
      for (const etcd::KeyValue& kv : c->kvs) {
        gh.live_claimed.insert(rdzv::ParseNodeTurn(kv.key.substr(keys.live_claims(gen).size())));
      }
    }
    if (auto fs = ReadFailureReports(etcd, keys, gen); fs.ok()) gh.failures = std::move(*fs);
    h.generations.push_back(std::move(gh));
  }
  if (!any_read) return Unavailable("etcd did not answer: the job's history cannot be read");
  return h;
}

json JobGoodput(const JobHistory& h, double now_unix, int code, bool ended, const std::string& host,
                int pid) {
  Goodput g(h.start_unix, nullptr, host, pid);
  double now = now_unix - h.start_unix;
  double last_end = -1;  // when the newest generation ended (a report written after the job ended
                         // still ends where the job did)
  json nodes = json::array();
  // Silent-data-corruption detections as each node's ranks recorded them, once each.
  std::map<std::tuple<int64_t, int64_t, int>, json> sdc;
  for (const GenerationHistory& gh : h.generations) {
    if (gh.plan) nodes.push_back(gh.plan->ToJson());
    for (const rdzv::FailureReport& f : gh.failures) {
      for (const json& d : f.sdc) {
        if (!d.is_object()) continue;
        sdc.emplace(std::make_tuple(d.value("generation", int64_t{-1}),
                                    d.value("step", int64_t{-1}), d.value("rank", -1)),
                    d);
      }
    }
    const json& r = gh.lead_report;
    const double start = r.is_object() ? r.value("start_unix", -1.0) : -1.0;
    g.GenerationStarted(static_cast<int>(gh.generation), start >= 0 ? start - h.start_unix : now);
    if (r.is_object()) AddLeadBeats(r, gh.generation, h.start_unix, &g);
    if (r.is_object() && r.value("end_unix", -1.0) >= 0) {
      g.GenerationEnded(r.value("end_unix", 0.0) - h.start_unix, r.value("exit_code", 0));
      last_end = std::max(last_end, r.value("end_unix", 0.0) - h.start_unix);
    }
    // The nodes' records, on the job's clock.
    auto on_job_clock = [&](json x) {
      x["time_s"] = x.value("time_unix", h.start_unix) - h.start_unix;
      x.erase("time_unix");
      return x;
    };
    // A node that was cut off, not dead, says so when it comes back (a "partition" report,
    // node_agent.cc RegisterAgain). Where its node rank was lost live (a vacancy it held), that
    // names the live recovery of its ranks, and the generation did not fail by it.
    std::vector<rdzv::FailureReport> failures;
    std::vector<std::pair<rdzv::LiveVacancy, rdzv::FailureReport>> partitioned;
    for (const rdzv::FailureReport& f : gh.failures) {
      const auto v = std::find_if(gh.live_vacancies.begin(), gh.live_vacancies.end(),
                                  [&](const rdzv::LiveVacancy& v) { return v.agent == f.agent; });
      if (f.kind == "partition" && v != gh.live_vacancies.end()) {
        partitioned.emplace_back(*v, f);
      } else {
        failures.push_back(f);
      }
    }
    auto name_partition = [&](json& x) {
      for (const auto& [v, f] : partitioned) {
        if (x.value("kind", "") == "node-lost" && x.value("node", -1) == v.node &&
            x.value("epoch", -1) == v.epoch) {
          x["kind"] = "partition";
          x["cause"] = f.cause;
        }
      }
    };
    for (const json& x : gh.stragglers) g.AddStraggler(on_job_clock(x));
    for (const json& x : gh.exit_faults) g.AddExitFault(on_job_clock(x));
    for (json x : gh.live_recoveries) {
      // time_s, ready_at_s, healed_at_s (-1 until it healed) and discarded_at_s on the job's clock.
      for (const std::string key : {"time", "ready_at", "healed_at", "discarded_at"}) {
        if (x.contains(key + "_unix")) {
          x[key + "_s"] = x[key + "_unix"].get<double>() - h.start_unix;
          x.erase(key + "_unix");
        } else if (x.contains(key + "_s")) {
          x[key + "_s"] = key == "time" ? 0.0 : -1.0;  // another clock's: not placed
        }
      }
      // Its replacement ran on a spare node that was lost in its turn (a later vacancy of the
      // same node rank names that agent) before it said that it healed: the recovery ended
      // there, and the next turn's records (or the vacancy's) go on from it.
      const bool open = x.value("healed_at_s", -1.0) < 0 && x.value("discarded_at_s", -1.0) < 0;
      const auto lost = std::find_if(
          gh.live_vacancies.begin(), gh.live_vacancies.end(), [&](const rdzv::LiveVacancy& v) {
            return v.agent == x.value("agent", "") && v.node == x.value("node", -1);
          });
      if (open && lost != gh.live_vacancies.end()) {
        x["discarded_at_s"] = lost->time_unix - h.start_unix;
        x["outcome"] = fmt::format(
            "node {} ({}), which ran its replacement, was lost too before it reported it healed",
            lost->node, lost->agent);
      }
      name_partition(x);
      g.AddLiveRecovery(std::move(x));
    }
    // A node lost live that no spare took: its ranks' records (a spare's are among the above).
    for (const rdzv::LiveVacancy& v : gh.live_vacancies) {
      if (gh.live_claimed.count({v.node, v.turn}) > 0) continue;
      const int64_t last =
          gh.lead_report.is_object() ? gh.lead_report.value("last_step", v.step) : v.step;
      for (int rank : v.ranks) {
        json x = {{"time_s", v.time_unix - h.start_unix},
                  {"generation", gh.generation},
                  {"rank", rank},
                  {"node", v.node},
                  {"kind", "node-lost"},
                  {"cause",
                   fmt::format("node {} ({}) was lost: its etcd lease expired", v.node, v.agent)},
                  {"step", v.step},
                  {"epoch", v.epoch},
                  {"members", v.members},
                  {"healed_at_s", -1},
                  {"outcome", fmt::format("no spare took node {}'s place: the others "
                                          "trained on without its ranks",
                                          v.node)},
                  {"steps_short_handed", std::max<int64_t>(0, last - v.step)}};
        name_partition(x);
        g.AddLiveRecovery(std::move(x));
      }
    }
    if (std::optional<FailureRecord> f = FailureOf(failures, gh.generation, h.start_unix)) {
      g.AddFailure(*f);
    }
  }
  json all_sdc = json::array();
  for (const auto& [key, d] : sdc) all_sdc.push_back(d);
  g.SetSdc(std::move(all_sdc));
  if (ended && last_end >= 0) now = std::min(now, last_end + 1.0);
  json report = g.Report(now, code, ended);
  report["nodes_by_generation"] = nodes;
  return report;
}

}  // namespace tenax::launch
