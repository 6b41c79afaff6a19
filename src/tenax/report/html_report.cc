#include "tenax/report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "tenax/core/format.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/run_paths.h"
#include "tenax/report/svg.h"

namespace tenax::report {
namespace {

constexpr const char* kStyle = R"(
body { font-family: Helvetica, Arial, sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.sub { color: #666; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 16px 0; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card .v { font-size: 19px; font-weight: bold; } .card .k { font-size: 12px; color: #666; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.charts svg, .wide svg { background: #fff; border: 1px solid #ddd; border-radius: 6px; }
table { border-collapse: collapse; background: #fff; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; overflow: auto; }
#tip { position: fixed; pointer-events: none; background: rgba(30,30,30,.88); color: #fff;
  font-size: 12px; padding: 4px 7px; border-radius: 4px; display: none; white-space: pre; }
.none { color: #888; font-size: 13px; }
)";

// Tooltips: the nearest logged point of every series under the pointer. Reads the numbers from
// the charts' data attributes, so the page needs nothing but itself. Sets data-rendered on
// <body> when done (and data-script-error on any error), which the browser test reads.
constexpr const char* kScript = R"(
window.addEventListener('error', function (e) {
  document.body.setAttribute('data-script-error', String(e.message));
});
(function () {
  var tip = document.getElementById('tip');
  document.querySelectorAll('svg.chart[data-x0]').forEach(function (svg) {
    var series = [];
    svg.querySelectorAll('g.series').forEach(function (g) {
      var xy = (g.getAttribute('data-xy') || '').split(' ').filter(Boolean).map(function (p) {
        var v = p.split(','); return [parseFloat(v[0]), parseFloat(v[1])];
      });
      series.push({name: g.getAttribute('data-series'), xy: xy});
      g.setAttribute('data-drawn-width', g.getBBox().width.toFixed(1));
    });
    var x0 = parseFloat(svg.getAttribute('data-x0')), x1 = parseFloat(svg.getAttribute('data-x1'));
    var width = svg.viewBox.baseVal.width, left = 64, right = 16;
    svg.addEventListener('mousemove', function (ev) {
      var pt = svg.createSVGPoint(); pt.x = ev.clientX; pt.y = ev.clientY;
      var p = pt.matrixTransform(svg.getScreenCTM().inverse());
      var x = x0 + (p.x - left) / (width - left - right) * (x1 - x0);
      var lines = ['step ' + Math.round(x)];
      series.forEach(function (s) {
        var best = null;
        s.xy.forEach(function (q) { if (!best || Math.abs(q[0] - x) < Math.abs(best[0] - x)) best = q; });
        if (best) lines.push(s.name + ': ' + best[1].toPrecision(5) + ' (step ' + best[0] + ')');
      });
      tip.textContent = lines.join('\n'); tip.style.display = 'block';
      tip.style.left = (ev.clientX + 14) + 'px'; tip.style.top = (ev.clientY + 10) + 'px';
    });
    svg.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  });
  document.body.setAttribute('data-charts', String(document.querySelectorAll('svg.chart').length));
  document.body.setAttribute('data-rendered', 'ok');
})();
)";

std::string Card(const std::string& key, const std::string& value) {
  return fmt::format("<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
                     EscapeXml(value), EscapeXml(key));
}

std::string Td(const std::string& s, bool number = false) {
  return fmt::format("<td{}>{}</td>", number ? " class=\"n\"" : "", EscapeXml(s));
}

double Num(const nlohmann::json& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string Basename(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Median(std::vector<double> v) {
  if (v.empty()) return "n/a";
  std::sort(v.begin(), v.end());
  return FormatCount(v[v.size() / 2]);
}

LineChart Chart(const char* id, const char* title, const char* y_label) {
  LineChart c;
  c.id = id;
  c.title = title;
  c.y_label = y_label;
  return c;
}

std::vector<ChartFile> StepCharts(const RunData& d) {
  std::vector<Marker> markers;
  for (const auto& s : d.loss_spikes) {
    markers.push_back(
        {Num(s, "step"), "spike (" + s.value("action", std::string()) + ")", "#ef6c00"});
  }
  if (d.goodput.is_object()) {
    int n = 0;
    for (const auto& f : d.goodput.value("failures", nlohmann::json::array())) {
      ++n;
      if (Num(f, "step", -1) < 0) continue;
      markers.push_back(
          {Num(f, "step"), fmt::format("{} {}", n, f.value("kind", std::string())), "#c62828"});
    }
  }
  auto series = [&](const char* name, const char* color, auto value) {
    Series s{name, color, {}, false};
    for (const StepPoint& p : d.steps) s.points.emplace_back(static_cast<double>(p.step), value(p));
    return s;
  };
  std::vector<ChartFile> out;
  LineChart loss = Chart("loss", "Loss", "loss (nats/token)");
  loss.series.push_back(series("train loss", "#1565c0", [](const StepPoint& p) { return p.loss; }));
  Series val{"validation loss", "#c62828", {}, true};
  for (const EvalPoint& e : d.evals)
    val.points.emplace_back(static_cast<double>(e.step), e.val_loss);
  loss.series.push_back(val);
  loss.markers = markers;
  loss.clip_outliers = true;
  out.push_back({"loss", LineChartSvg(loss)});

  LineChart lr = Chart("lr", "Learning rate", "learning rate");
  lr.series.push_back(series("lr", "#6a1b9a", [](const StepPoint& p) { return p.lr; }));
  out.push_back({"lr", LineChartSvg(lr)});

  LineChart gn = Chart("grad_norm", "Gradient norm (before clipping)", "global L2 norm");
  gn.series.push_back(
      series("gradient norm", "#00838f", [](const StepPoint& p) { return p.grad_norm; }));
  gn.markers = markers;
  gn.clip_outliers = true;
  out.push_back({"grad_norm", LineChartSvg(gn)});

  LineChart tps = Chart("tokens_per_s", "Throughput", "tokens/s (all ranks)");
  tps.series.push_back(
      series("tokens/s", "#2e7d32", [](const StepPoint& p) { return p.tokens_per_s; }));
  tps.y_format = [](double v) { return FormatCount(v); };
  out.push_back({"tokens_per_s", LineChartSvg(tps)});

  const bool mfu = std::any_of(d.steps.begin(), d.steps.end(),
                               [](const StepPoint& p) { return p.mfu.has_value(); });
  if (mfu) {
    LineChart m = Chart("mfu", "Model FLOPs utilization", "MFU (%)");
    m.series.push_back(series("MFU %", "#ef6c00", [](const StepPoint& p) {
      return p.mfu ? 100 * *p.mfu : std::nan("");
    }));
    out.push_back({"mfu", LineChartSvg(m)});
  } else {
    // A CPU has no peak to divide by: the achieved model FLOP/s instead.
    LineChart m = Chart("mfu", "Model FLOP/s (no MFU: the device has no known peak)", "FLOP/s");
    m.series.push_back(
        series("model FLOP/s", "#ef6c00", [](const StepPoint& p) { return p.flops_per_s; }));
    m.y_format = [](double v) { return FormatCount(v); };
    out.push_back({"mfu", LineChartSvg(m)});
  }
  LineChart mem = Chart("memory", "Peak memory", "GiB");
  mem.series.push_back(series("peak memory GiB", "#455a64", [](const StepPoint& p) {
    return static_cast<double>(p.mem_peak_bytes) / (1024.0 * 1024 * 1024);
  }));
  out.push_back({"memory", LineChartSvg(mem)});
  return out;
}

std::string FailureTable(const nlohmann::json& fails) {
  if (fails.empty()) return "<p class=\"none\">No failures.</p>\n";
  std::string out =
      "<table id=\"failures\"><tr><th>#</th><th>time (s)</th><th>launch</th><th>gen</th>"
      "<th>kind</th><th>rank</th><th>slot</th><th>host</th><th>step</th><th>detection "
      "(s)</th><th>recovery (s)</th><th>resumed from</th><th>replacement slot</th><th>exit "
      "code</th><th>cause</th></tr>\n";
  int n = 0;
  for (const auto& f : fails) {
    auto i = [&](const char* k) {
      const int64_t v = f.value(k, int64_t{-1});
      return v < 0 ? std::string("-") : std::to_string(v);
    };
    const double rec = Num(f, "recovery_s", -1);
    out += fmt::format("<tr data-kind=\"{}\">", EscapeXml(f.value("kind", std::string())));
    out += Td(std::to_string(++n), true) + Td(fmt::format("{:.1f}", Num(f, "time_s")), true) +
           Td(std::to_string(f.value("segment", 0) + 1), true) + Td(i("generation"), true) +
           Td(f.value("kind", std::string())) + Td(i("rank"), true) + Td(i("slot"), true) +
           Td(f.value("host", std::string())) + Td(i("step"), true) +
           Td(fmt::format("{:.2f}", Num(f, "detection_s")), true) +
           Td(rec < 0 ? "never" : fmt::format("{:.2f}", rec), true) + Td(i("resumed_from"), true) +
           Td(i("replacement_slot"), true) + Td(std::to_string(f.value("exit_code", 0)), true) +
           Td(f.value("cause", std::string()));
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// Where and when something happened to a rank: the leading columns of the straggler and
// after-finishing tables (goodput.json records with time_s, generation, rank, slot, host, step).
constexpr const char* kRankEventHeader =
    "<tr><th>time (s)</th><th>gen</th><th>rank</th><th>slot</th><th>host</th><th>step</th>";
std::string RankEventCells(const nlohmann::json& x) {
  return Td(fmt::format("{:.1f}", Num(x, "time_s")), true) +
         Td(std::to_string(x.value("generation", 0)), true) +
         Td(std::to_string(x.value("rank", -1)), true) +
         Td(std::to_string(x.value("slot", -1)), true) + Td(x.value("host", std::string())) +
         Td(std::to_string(x.value("step", int64_t{0})), true);
}

std::string StragglerTable(const nlohmann::json& s) {
  if (s.empty()) return "<p class=\"none\">No stragglers.</p>\n";
  std::string out = std::string("<table id=\"stragglers\">") + kRankEventHeader +
                    "<th>compute (s/step)</th><th>median of the others (s/step)</th></tr>\n";
  for (const auto& x : s) {
    out += "<tr>" + RankEventCells(x) + Td(fmt::format("{:.3f}", Num(x, "compute_s")), true) +
           Td(fmt::format("{:.3f}", Num(x, "median_s")), true) + "</tr>\n";
  }
  return out + "</table>\n";
}

// Ranks that hung or crashed in their teardown, after their work was done; shown only when any.
std::string ExitFaultTable(const nlohmann::json& s) {
  if (s.empty()) return "";
  std::string out = std::string(
                        "<h2>After finishing</h2>\n<p class=\"sub\">Ranks that hung or crashed "
                        "in their teardown, after their last step and final checkpoint: the run "
                        "was not affected.</p>\n<table id=\"exit-faults\">") +
                    kRankEventHeader + "<th>kind</th><th>what happened</th></tr>\n";
  for (const auto& x : s) {
    out += "<tr>" + RankEventCells(x) + Td(x.value("kind", std::string())) +
           Td(x.value("detail", std::string())) + "</tr>\n";
  }
  return out + "</table>\n";
}

// Live recoveries (resilience.mode = "live", goodput.json live_recoveries): a rank lost while
// the others trained on, and its replacement's healing; shown only when any.
std::string LiveRecoveryTable(const nlohmann::json& s) {
  if (s.empty()) return "";
  std::string out =
      std::string(
          "<h2>Live recoveries</h2>\n<p class=\"sub\">Ranks lost while the others trained on "
          "with their samples (resilience.mode = \"live\"): no generation ended, nothing was "
          "reloaded; each replacement copied the state from a live rank.</p>\n"
          "<table id=\"live-recoveries\">") +
      kRankEventHeader +
      "<th>kind</th><th>what happened</th><th>trained on</th><th>replacement ready after "
      "(s)</th><th>healed after (s)</th>"
      "<th>from rank</th><th>bytes</th><th>steps short-handed</th></tr>\n";
  for (const auto& x : s) {
    std::string members;
    for (const auto& m : x.value("members", nlohmann::json::array())) {
      members += (members.empty() ? "" : ",") + std::to_string(m.get<int>());
    }
    const double healed = Num(x, "healed_at_s", -1);
    const double ready = Num(x, "ready_at_s", -1);
    out += "<tr>" + RankEventCells(x) + Td(x.value("kind", std::string())) +
           Td(x.value("cause", std::string())) + Td(members) +
           Td(ready >= 0 ? fmt::format("{:.2f}", ready - Num(x, "time_s")) : "-", true) +
           Td(healed >= 0 ? fmt::format("{:.2f}", healed - Num(x, "time_s"))
                          : x.value("outcome", std::string("not yet")),
              healed >= 0) +
           Td(healed >= 0 ? std::to_string(x.value("healed_from", -1)) : "-", true) +
           Td(healed >= 0 ? std::to_string(x.value("healed_bytes", int64_t{0})) : "-", true) +
           Td(x.contains("steps_short_handed")
                  ? std::to_string(x.value("steps_short_handed", int64_t{0}))
                  : "-",
              true) +
           "</tr>\n";
  }
  return out + "</table>\n";
}

// Silent data corruption found by replay (resilience.sdc_check_interval, <run>/sdc.json): the
// step, the rank named and its host, and the three digests that named it; shown only when any.
std::string SdcTable(const nlohmann::json& s) {
  if (s.empty()) return "";
  std::string out =
      "<h2>Silent data corruption</h2>\n<p class=\"sub\">A replayed step disagreed with the "
      "rank's own result; a third rank's replay named the faulty one, whose slot was "
      "quarantined. Training went back to the newest checkpoint, which a check had "
      "verified.</p>\n<table id=\"sdc\"><tr><th>step</th><th>generation</th><th>rank</th>"
      "<th>host</th><th>own result</th><th>replay</th><th>third replay</th><th>why</th></tr>\n";
  for (const auto& x : s) {
    const int rank = x.value("rank", -1);
    out +=
        "<tr>" + Td(std::to_string(x.value("step", int64_t{0})), true) +
        Td(std::to_string(x.value("generation", 0)), true) +
        Td(rank >= 0 ? std::to_string(rank) : "undecided", true) +
        Td(x.value("host", std::string())) + Td(x.value("own", std::string())) +
        Td(fmt::format("rank {}: {}", x.value("replayed_by", -1),
                       x.value("replay", std::string()))) +
        Td(fmt::format("rank {}: {}", x.value("third_by", -1), x.value("third", std::string()))) +
        Td(x.value("reasoning", std::string())) + "</tr>\n";
  }
  return out + "</table>\n";
}

std::string SpikeTable(const nlohmann::json& s) {
  if (s.empty()) return "<p class=\"none\">No loss spikes.</p>\n";
  std::string out =
      "<table id=\"spikes\"><tr><th>step</th><th>loss</th><th>median before</th><th>ratio</th>"
      "<th>action</th><th>generation</th></tr>\n";
  for (const auto& x : s) {
    const double loss = Num(x, "loss"), median = Num(x, "median");
    out += "<tr>" + Td(std::to_string(x.value("step", int64_t{0})), true) +
           Td(FormatNumber(loss), true) + Td(FormatNumber(median), true) +
           Td(median > 0 ? fmt::format("{:.1f}x", loss / median) : "-", true) +
           Td(x.value("action", std::string())) +
           Td(std::to_string(x.value("generation", 0)), true) + "</tr>\n";
  }
  return out + "</table>\n";
}

}  // namespace

std::string ReportHtml(const RunData& d, std::vector<ChartFile>* charts) {
  charts->clear();
  const std::string name = Basename(d.run_dir);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>tenax report: "
      "{}</title>\n<style>{}</style></head>\n<body>\n<div id=\"tip\"></div>\n",
      EscapeXml(name), kStyle);
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  html += fmt::format(
      "<h1>tenax run {}</h1>\n<div class=\"sub\">{} &middot; written {} (again: "
      "<code>tenax report RUN_FOLDER</code>)</div>\n",
      EscapeXml(name), EscapeXml(d.run_dir), when);

  // Summary.
  html += "<div class=\"cards\" id=\"summary\">";
  if (!d.steps.empty()) {
    const StepPoint& last = d.steps.back();
    html += Card("last step", std::to_string(last.step));
    html += Card("train loss", FormatNumber(last.loss));
    std::vector<double> tps;
    for (const StepPoint& p : d.steps) tps.push_back(p.tokens_per_s);
    html += Card("tokens/s (median)", Median(tps));
    html += Card("tokens trained", FormatCount(static_cast<double>(last.tokens)));
    if (last.mfu) {
      html += Card("MFU", fmt::format("{:.1f}%", 100 * *last.mfu));
    } else {
      html += Card("model FLOP/s", FormatCount(last.flops_per_s));
    }
    int64_t mem = 0, reserved = 0;
    for (const StepPoint& p : d.steps) {
      mem = std::max(mem, p.mem_peak_bytes);
      reserved = std::max(reserved, p.mem_peak_reserved_bytes);
    }
    html += Card("peak memory", FormatGiB(static_cast<double>(mem)));
    // GPU runs: what the caching allocator held at most, the figure that meets the capacity.
    if (reserved > 0) html += Card("peak reserved (GPU)", FormatGiB(static_cast<double>(reserved)));
  }
  if (!d.evals.empty()) html += Card("validation loss", FormatNumber(d.evals.back().val_loss));
  const bool goodput = d.goodput.is_object();
  if (goodput) {
    const nlohmann::json& g = d.goodput;
    html += Card("wall time", FormatDuration(Num(g, "wall_s")));
    html += Card("effective training time",
                 fmt::format("{:.1f}%", 100 * Num(g, "effective_training_ratio")));
    html += Card("failures", std::to_string(g.value("failures", nlohmann::json::array()).size()));
    html += Card("restarts", std::to_string(g.value("restarts", 0)));
    if (g.value("launches", 1) > 1)
      html += Card("launches", std::to_string(g.value("launches", 1)));
  }
  html += "</div>\n";

  // Training curves.
  html += "<h2>Training</h2>\n";
  if (d.steps.empty())
    html += "<p class=\"none\">No step was logged (metrics.jsonl is empty).</p>\n";
  html += "<div class=\"charts\">\n";
  for (ChartFile& c : StepCharts(d)) {
    html += c.svg;
    charts->push_back(std::move(c));
  }
  html += "</div>\n";

  // Goodput.
  html += "<h2>Goodput</h2>\n";
  if (goodput) {
    std::vector<double> commits;
    for (const CheckpointInfo& c : d.checkpoints) commits.push_back(c.committed_unix);
    ChartFile bar{"goodput", GoodputBarSvg(d.goodput)};
    ChartFile timeline{"timeline", GoodputTimelineSvg(d.goodput, commits)};
    html += "<div class=\"wide\">" + bar.svg + "</div>\n<div class=\"wide\">" + timeline.svg +
            "</div>\n";
    charts->push_back(std::move(bar));
    charts->push_back(std::move(timeline));
    html += fmt::format(
        "<p class=\"sub\">{} step(s) redone after restarts. Totals are exact "
        "(goodput.json); inside a generation, where the redone steps begin is interpolated by "
        "step. Ticks above the timeline: checkpoints still on disk.</p>\n",
        d.goodput.value("steps_redone", int64_t{0}));
    html +=
        "<h2>Failures</h2>\n" + FailureTable(d.goodput.value("failures", nlohmann::json::array()));
    html += "<h2>Stragglers</h2>\n" +
            StragglerTable(d.goodput.value("stragglers", nlohmann::json::array()));
    html += ExitFaultTable(d.goodput.value("exit_faults", nlohmann::json::array()));
    html += LiveRecoveryTable(d.goodput.value("live_recoveries", nlohmann::json::array()));
  } else {
    html +=
        "<p class=\"none\">No goodput.json: the run was not started by <code>tenax launch</code>"
        ".</p>\n";
  }
  html += SdcTable(d.sdc);
  html += "<h2>Loss spikes</h2>\n" + SpikeTable(d.loss_spikes);

  html += "<h2>Checkpoints</h2>\n";
  if (d.checkpoints.empty()) {
    html +=
        "<p class=\"none\">No committed checkpoint in " + EscapeXml(d.checkpoint_dir) + ".</p>\n";
  } else {
    html += "<table id=\"checkpoints\"><tr><th>step</th><th>committed</th></tr>\n";
    for (const CheckpointInfo& c : d.checkpoints) {
      const std::time_t t = static_cast<std::time_t>(c.committed_unix);
      char buf[64];
      std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
      html += "<tr>" + Td(std::to_string(c.step), true) + Td(buf) + "</tr>\n";
    }
    html += "</table>\n<p class=\"sub\">in " + EscapeXml(d.checkpoint_dir) + "</p>\n";
  }
  if (!d.config_toml.empty()) {
    html += "<h2>Config</h2>\n<details><summary>config.toml</summary><pre>" +
            EscapeXml(d.config_toml) + "</pre></details>\n";
  }
  html += fmt::format("<script>{}</script>\n</body></html>\n", kScript);
  return html;
}

Result<WrittenReport> WriteReport(const std::string& run_dir, const std::string& goodput_path,
                                  const std::string& html_path) {
  TENAX_ASSIGN_OR_RETURN(RunData data, LoadRunData(run_dir, goodput_path));
  std::vector<ChartFile> charts;
  const std::string html = ReportHtml(data, &charts);
  WrittenReport out;
  out.html_path = html_path.empty() ? RunPaths(run_dir).report_html() : html_path;
  const std::string svg_dir = RunPaths::ReportChartsBeside(out.html_path);
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(svg_dir));
  for (const ChartFile& c : charts) {
    const std::string path = JoinPath(svg_dir, c.id + ".svg");
    TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(path, c.svg));
    out.svg_paths.push_back(path);
  }
  TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(out.html_path, html));
  return out;
}

void WriteReportAtEnd(const std::string& run_dir, const std::string& goodput_path,
                      const std::string& who) {
  if (run_dir.empty()) return;
  Result<WrittenReport> r = WriteReport(run_dir, goodput_path);
  if (r.ok()) {
    log::Info("{}: report written to {} (charts as SVG in {})", who, r->html_path,
              ParentDir(r->svg_paths.empty() ? r->html_path : r->svg_paths.front()));
  } else {
    log::Warn("{}: could not write the run's report: {}", who, r.status().message());
  }
}

}  // namespace tenax::report
