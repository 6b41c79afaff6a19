// The live view of a running job, served by `tenax launch --metrics-port` and `tenax train
// --metrics-port` (http_server.h):
//   /             an HTML dashboard (ranks alive, step, tokens/s, loss, goodput so far,
//                 failures), self-contained; its script polls /status.json every 2 s
//   /status.json  the status object below
//   /metrics      the same numbers in Prometheus text format 0.0.4
// The status object is the launcher's status file (docs/launcher_protocol.md) or, for a plain
// `tenax train`, its subset; both may carry "training" (run_data.h's ReadLiveTraining) and
// "tokens_total".
// Prometheus conventions: every family has HELP and TYPE before its samples; counters only go up
// and end in _total; units are in the names (seconds, bytes; ratios are 0..1). The goodput
// seconds per bucket are gauges: a restart that redoes steps moves their seconds from
// productive to lost, so a bucket can shrink.
// Non-goals: history (Prometheus keeps it), more than one run per server.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tenax/report/http_server.h"

namespace tenax::report {

std::string PrometheusText(const nlohmann::json& status);
// The dashboard page, showing `status` at once and then polling /status.json.
std::string DashboardHtml(const nlohmann::json& status);
// The status of a `tenax train` process without a launcher: the run folder's training series
// (world: the number of ranks, for the page).
nlohmann::json TrainStatus(const std::string& run_dir, int world);
// Answers /, /status.json and /metrics from `status` (404 otherwise).
HttpResponse ServeLive(const std::string& path, const nlohmann::json& status);

}  // namespace tenax::report
