#include "tenax/report/live.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "tenax/report/run_data.h"

namespace tenax::report {
namespace {

std::optional<double> OptionalNum(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  // NaN (a null in status.json) is unknown, not a value: the family is left out.
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string Value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::abs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Writes metric families: HELP and TYPE once, before the family's samples.
class Exposition {
 public:
  void Family(const std::string& name, const char* type, const std::string& help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(const std::string& name, double v, const std::string& labels = "") {
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + Value(v) + "\n";
  }
  // A family with one unlabelled sample, when the value is known.
  void One(const std::string& name, const char* type, const std::string& help,
           std::optional<double> v) {
    if (!v) return;
    Family(name, type, help);
    Sample(name, *v);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string PrometheusText(const nlohmann::json& s) {
  Exposition e;
  const char* kGauge = "gauge";
  const char* kCounter = "counter";
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& g = s.is_object() && s.contains("goodput") ? s["goodput"] : empty;
  const nlohmann::json& t = s.is_object() && s.contains("training") ? s["training"] : empty;

  // The job.
  e.One("tenax_ranks_alive", kGauge, "rank processes of this node running",
        OptionalNum(s, "ranks_alive"));
  if (s.is_object() && s.contains("ranks") && s["ranks"].is_array()) {
    e.One("tenax_ranks", kGauge, "rank processes this node should run",
          static_cast<double>(s["ranks"].size()));
  }
  e.One("tenax_step", kGauge, "newest training step finished", OptionalNum(s, "step"));
  e.One("tenax_generation", kGauge, "launch generation (0, then 1 after the first restart, ...)",
        OptionalNum(s, "generation"));
  e.One("tenax_restarts_total", kCounter, "restarts of every rank from the newest checkpoint",
        OptionalNum(s, "restarts"));
  e.One("tenax_failures_total", kCounter, "failures detected (every kind)",
        OptionalNum(s, "failures"));
  if (g.contains("failures_by_kind") && g["failures_by_kind"].is_object()) {
    e.Family("tenax_failures_by_kind_total", kCounter,
             "failures detected, by kind (docs/launcher_protocol.md)");
    for (const auto& [kind, n] : g["failures_by_kind"].items()) {
      if (n.is_number()) {
        e.Sample("tenax_failures_by_kind_total", n.get<double>(),
                 fmt::format("kind=\"{}\"", Label(kind)));
      }
    }
  }
  if (g.contains("sdc") && g["sdc"].is_array() && !g["sdc"].empty()) {
    e.Family("tenax_silent_corruption_detected", kGauge,
             "silent data corruption found by replay: 1 per detection, labelled with the step, "
             "the rank named (-1: undecided), its host and the digests (<run>/sdc.json)");
    for (const auto& d : g["sdc"]) {
      e.Sample(
          "tenax_silent_corruption_detected", 1,
          fmt::format("step=\"{}\",rank=\"{}\",host=\"{}\",own=\"{}\",replay=\"{}\","
                      "third=\"{}\"",
                      d.value("step", int64_t{0}), d.value("rank", -1),
                      Label(d.value("host", std::string())), Label(d.value("own", std::string())),
                      Label(d.value("replay", std::string())),
                      Label(d.value("third", std::string()))));
    }
  }
  e.One("tenax_stragglers_total", kCounter, "straggler reports", OptionalNum(s, "stragglers"));
  e.One("tenax_spares_ready", kGauge, "standby processes ready to take a failed slot",
        OptionalNum(s, "spares_ready"));
  if (s.is_object() && s.contains("quarantined_slots") && s["quarantined_slots"].is_array()) {
    e.One("tenax_quarantined_slots", kGauge, "slots excluded for good",
          static_cast<double>(s["quarantined_slots"].size()));
  }
  // Goodput.
  e.One("tenax_run_start_time_seconds", kGauge, "when the run's first launch started (unix time)",
        OptionalNum(s, "run_start_unix"));
  e.One("tenax_wall_seconds", kGauge, "wall time since the run's first launch",
        OptionalNum(g, "wall_s"));
  e.One("tenax_effective_training_ratio", kGauge, "productive training time / wall time (0..1)",
        OptionalNum(g, "effective_training_ratio"));
  if (g.contains("time_s") && g["time_s"].is_object()) {
    e.Family("tenax_goodput_seconds", kGauge,
             "wall time split for goodput; a gauge because a restart that redoes steps moves "
             "their seconds from productive to lost");
    for (const auto& [bucket, secs] : g["time_s"].items()) {
      if (secs.is_number()) {
        e.Sample("tenax_goodput_seconds", secs.get<double>(),
                 fmt::format("bucket=\"{}\"", Label(bucket)));
      }
    }
  }
  // Training.
  e.One("tenax_tokens_total", kCounter,
        s.value("source", std::string()) == "tenax launch"
            ? "tokens processed by this launch, including steps a restart redid"
            : "tokens trained in the run so far",
        OptionalNum(s, "tokens_total"));
  e.One("tenax_trained_tokens", kGauge,
        "tokens in the model's training trajectory (falls back when a restart rolls back)",
        OptionalNum(t, "tokens"));
  e.One("tenax_tokens_per_second", kGauge, "training throughput of the last logged step",
        OptionalNum(t, "tokens_per_s") ? OptionalNum(t, "tokens_per_s")
                                       : OptionalNum(s, "tokens_per_s"));
  e.One("tenax_train_loss", kGauge, "training loss of the last logged step (nats/token)",
        OptionalNum(t, "loss"));
  e.One("tenax_validation_loss", kGauge, "loss of the last evaluation (nats/token)",
        OptionalNum(t, "val_loss"));
  e.One("tenax_learning_rate", kGauge, "learning rate of the last logged step",
        OptionalNum(t, "lr"));
  e.One("tenax_grad_norm", kGauge, "global gradient norm of the last logged step (before clipping)",
        OptionalNum(t, "grad_norm"));
  e.One("tenax_model_flops_per_second", kGauge,
        "achieved model FLOP/s (6N + attention per token) of the last logged step",
        OptionalNum(t, "flops_per_s"));
  e.One("tenax_mfu_ratio", kGauge, "model FLOPs utilization of the device's bf16 peak (0..1)",
        OptionalNum(t, "mfu"));
  e.One("tenax_memory_peak_bytes", kGauge, "peak device memory of the logging rank",
        OptionalNum(t, "mem_peak_bytes"));
  e.One("tenax_last_checkpoint_step", kGauge, "step of the newest committed checkpoint",
        OptionalNum(t, "last_checkpoint_step"));
  e.One("tenax_last_checkpoint_timestamp_seconds", kGauge,
        "when the newest checkpoint was committed (unix time)",
        OptionalNum(t, "last_checkpoint_unix"));
  const auto ckpt = OptionalNum(t, "last_checkpoint_unix");
  const auto now = OptionalNum(s, "now_unix");
  if (ckpt && now) {
    e.One("tenax_seconds_since_last_checkpoint", kGauge,
          "seconds since the newest checkpoint was committed", std::max(0.0, *now - *ckpt));
  }
  return e.Take();
}

namespace {

constexpr const char* kPage = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tenax live</title>
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 20px; color: #222; background: #fafafa; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 20px 0 6px; }
.sub { color: #666; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 118px; }
.card .v { font-size: 19px; font-weight: bold; } .card .k { font-size: 12px; color: #666; }
table { border-collapse: collapse; background: #fff; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f0f0f0; } .bad { color: #c62828; font-weight: bold; } .ok { color: #2e7d32; }
svg { background: #fff; border: 1px solid #ddd; border-radius: 6px; }
</style></head><body>
<h1>tenax live</h1><div class="sub" id="where"></div>
<div class="cards" id="cards"></div>
<h2>Loss</h2><svg id="loss" width="720" height="180" viewBox="0 0 720 180"></svg>
<h2>Goodput so far</h2><svg id="goodput" width="720" height="74" viewBox="0 0 720 74"></svg>
<h2>Failures</h2><div id="failures"></div>
<h2>Ranks</h2><div id="ranks"></div>
<script>
var initial = /*STATUS*/;
window.addEventListener('error', function (e) {
  document.body.setAttribute('data-script-error', String(e.message));
});
var colours = {productive: '#2e7d32', checkpoint: '#1565c0', lost: '#c62828', detection: '#ef6c00',
               restart: '#8e24aa', down: '#424242', idle: '#b0b0b0'};
function fmt(v, digits) {
  if (v === undefined || v === null) return 'n/a';
  if (typeof v !== 'number') return String(v);
  var a = Math.abs(v);
  if (a >= 1e12) return (v / 1e12).toFixed(2) + 'T';
  if (a >= 1e9) return (v / 1e9).toFixed(2) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(2) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
  return v.toPrecision(digits || 4).replace(/\.?0+$/, '');
}
function esc(s) { return String(s).replace(/[&<>"]/g, function (c) {
  return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; }); }
function card(k, v, id) {
  return '<div class="card" id="' + id + '"><div class="v">' + esc(v) + '</div><div class="k">' +
         esc(k) + '</div></div>';
}
function render(s) {
  var t = s.training || {}, g = s.goodput || {};
  document.getElementById('where').textContent = (s.source || 'tenax') +
      (g.run_dir || s.run_dir ? ' \u00b7 ' + (g.run_dir || s.run_dir) : '') +
      ' \u00b7 updated ' + new Date().toLocaleTimeString();
  var c = '';
  if (s.ranks) c += card('ranks alive', s.ranks_alive + ' / ' + s.ranks.length, 'c-ranks');
  c += card('step', s.step !== undefined ? s.step : (t.step !== undefined ? t.step : 'n/a'), 'c-step');
  c += card('tokens/s', fmt(t.tokens_per_s !== undefined ? t.tokens_per_s : s.tokens_per_s), 'c-tps');
  c += card('train loss', fmt(t.loss), 'c-loss');
  if (t.val_loss !== undefined) c += card('validation loss', fmt(t.val_loss), 'c-val');
  if (t.mfu !== undefined) c += card('MFU', (100 * t.mfu).toFixed(1) + '%', 'c-mfu');
  else if (t.flops_per_s !== undefined) c += card('model FLOP/s', fmt(t.flops_per_s), 'c-flops');
  if (t.mem_peak_bytes !== undefined)
    c += card('peak memory', (t.mem_peak_bytes / 1073741824).toFixed(3) + ' GiB', 'c-mem');
  if (t.last_checkpoint_step !== undefined && s.now_unix !== undefined)
    c += card('last checkpoint', 'step ' + t.last_checkpoint_step + ', ' +
              Math.round(s.now_unix - t.last_checkpoint_unix) + ' s ago', 'c-ckpt');
  if (g.effective_training_ratio !== undefined)
    c += card('effective training', (100 * g.effective_training_ratio).toFixed(1) + '%', 'c-good');
  if (s.failures !== undefined) c += card('failures', s.failures, 'c-fail');
  if (s.restarts !== undefined) c += card('restarts', s.restarts, 'c-restarts');
  document.getElementById('cards').innerHTML = c;
  // Loss history.
  var h = t.history || [], svg = document.getElementById('loss'), out = '';
  if (h.length > 0) {
    var x0 = h[0][0], x1 = h[h.length - 1][0], y0 = Infinity, y1 = -Infinity;
    h.forEach(function (p) { y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]); });
    if (x1 <= x0) x1 = x0 + 1; if (y1 <= y0) { y1 = y0 + 1; }
    var d = h.map(function (p, i) {
      return (i ? 'L' : 'M') + (50 + (p[0] - x0) / (x1 - x0) * 650).toFixed(1) + ',' +
             (160 - (p[1] - y0) / (y1 - y0) * 140).toFixed(1);
    }).join(' ');
    out = '<path d="' + d + '" fill="none" stroke="#1565c0" stroke-width="1.6"/>' +
          '<text x="4" y="24" font-size="11">' + fmt(y1) + '</text>' +
          '<text x="4" y="160" font-size="11">' + fmt(y0) + '</text>' +
          '<text x="50" y="176" font-size="11">step ' + x0 + '</text>' +
          '<text x="700" y="176" font-size="11" text-anchor="end">step ' + x1 + '</text>';
  } else {
    out = '<text x="360" y="90" text-anchor="middle" fill="#888">no step logged yet</text>';
  }
  svg.innerHTML = out;
  svg.setAttribute('data-points', String(h.length));
  // Goodput bar.
  var gs = document.getElementById('goodput'), bar = '', x = 0, wall = g.wall_s || 0;
  if (g.time_s && wall > 0) {
    Object.keys(colours).forEach(function (k) {
      var w = (g.time_s[k] || 0) / wall * 700;
      if (w > 0) bar += '<rect data-bucket="' + k + '" x="' + (10 + x).toFixed(1) +
          '" y="8" width="' + w.toFixed(1) + '" height="22" fill="' + colours[k] + '"><title>' + k +
          ' ' + (g.time_s[k]).toFixed(1) + ' s</title></rect>';
      x += w;
    });
    var lx = 10;
    Object.keys(colours).forEach(function (k) {
      if (!(g.time_s[k] > 0)) return;
      bar += '<rect x="' + lx + '" y="38" width="9" height="9" fill="' + colours[k] + '"/>' +
             '<text x="' + (lx + 12) + '" y="46" font-size="11">' + k + ' ' +
             g.time_s[k].toFixed(1) + ' s</text>';
      lx += 24 + 6 * (k.length + g.time_s[k].toFixed(1).length + 2);
    });
    bar += '<text x="10" y="66" font-size="11">' + wall.toFixed(1) + ' s wall, ' +
           (100 * (g.effective_training_ratio || 0)).toFixed(1) + '% effective training time</text>';
  } else {
    bar = '<text x="360" y="35" text-anchor="middle" fill="#888">' +
          (s.source === 'tenax train' ? 'goodput is measured by tenax launch' : 'no data yet') + '</text>';
  }
  gs.innerHTML = bar;
  // Failures and ranks.
  var f = g.failures || [], ft = '';
  if (f.length) {
    ft = '<table><tr><th>#</th><th>time (s)</th><th>kind</th><th>rank</th><th>host</th><th>step</th><th>cause</th></tr>';
    f.forEach(function (r, i) {
      ft += '<tr class="failure"><td>' + (i + 1) + '</td><td>' + r.time_s.toFixed(1) + '</td><td>' + esc(r.kind) +
            '</td><td>' + r.rank + '</td><td>' + esc(r.host || '') + '</td><td>' + r.step + '</td><td>' +
            esc(r.cause || '') + '</td></tr>';
    });
    ft += '</table>';
  } else ft = '<span class="ok">none</span>';
  document.getElementById('failures').innerHTML = ft;
  var rt = '';
  if (s.ranks) {
    rt = '<table><tr><th>rank</th><th>slot</th><th>pid</th><th>alive</th><th>step</th><th>phase</th><th>host</th><th>tokens/s</th></tr>';
    s.ranks.forEach(function (r) {
      rt += '<tr><td>' + r.rank + '</td><td>' + r.slot + '</td><td>' + r.pid + '</td><td class="' +
            (r.alive ? 'ok">yes' : 'bad">no') + '</td><td>' + r.step + '</td><td>' + esc(r.phase) +
            '</td><td>' + esc(r.host || '') + '</td><td>' + fmt(r.tokens_per_s) + '</td></tr>';
    });
    rt += '</table>';
  } else rt = '<span class="sub">one process (tenax train)</span>';
  document.getElementById('ranks').innerHTML = rt;
  var n = parseInt(document.body.getAttribute('data-updates') || '0', 10) + 1;
  document.body.setAttribute('data-updates', String(n));
  document.body.setAttribute('data-step', String(s.step !== undefined ? s.step : t.step));
}
function poll() {
  fetch('status.json', {cache: 'no-store'}).then(function (r) { return r.json(); })
      .then(render).catch(function () {
        document.getElementById('where').textContent += ' (not reachable: the run may have ended)';
      });
}
render(initial);
setInterval(poll, 2000);
</script></body></html>
)HTML";

}  // namespace

std::string DashboardHtml(const nlohmann::json& status) {
  std::string page = kPage;
  // "</" inside a script would end it early: JSON escapes it harmlessly as "<\/".
  std::string json = status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (size_t i = 0; (i = json.find("</", i)) != std::string::npos; i += 3)
    json.replace(i, 2, "<\\/");
  const std::string marker = "/*STATUS*/";
  page.replace(page.find(marker), marker.size(), json);
  return page;
}

nlohmann::json TrainStatus(const std::string& run_dir, int world) {
  using namespace std::chrono;
  nlohmann::json s = {
      {"source", "tenax train"},
      {"run_dir", run_dir},
      {"world", world},
      {"now_unix", duration<double>(system_clock::now().time_since_epoch()).count()}};
  const nlohmann::json t = ReadLiveTraining(run_dir);
  if (!t.empty()) {
    s["training"] = t;
    s["step"] = t.value("step", int64_t{0});
    // Tokens trained in this run's trajectory: a counter within the process (a restarted
    // process starts from its checkpoint's count, which Prometheus reads as a reset).
    s["tokens_total"] = t.value("tokens", int64_t{0});
  }
  return s;
}

HttpResponse ServeLive(const std::string& path, const nlohmann::json& status) {
  HttpResponse r;
  if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = PrometheusText(status);
  } else if (path == "/status.json") {
    r.content_type = "application/json";
    r.body = status.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else if (path == "/" || path == "/index.html") {
    r.content_type = "text/html; charset=utf-8";
    r.body = DashboardHtml(status);
  } else {
    r.code = 404;
    r.body = "tenax serves / (live page), /status.json and /metrics\n";
  }
  return r;
}

}  // namespace tenax::report
