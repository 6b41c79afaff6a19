#include "tenax/report/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tenax::report {
namespace {

constexpr const char* kFont = "font-family=\"Helvetica, Arial, sans-serif\"";

// Round tick positions covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> Ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

// Long series: keep the first and last point and, per pixel column, the lowest and highest.
std::vector<std::pair<double, double>> Reduce(const std::vector<std::pair<double, double>>& pts,
                                              double x0, double x1, int columns) {
  if (pts.size() <= static_cast<size_t>(2 * columns)) return pts;
  std::vector<std::pair<double, double>> out;
  int column = -1;
  std::pair<double, double> lo, hi;
  auto flush = [&] {
    if (column < 0) return;
    if (lo.first <= hi.first) {
      out.push_back(lo);
      if (hi != lo) out.push_back(hi);
    } else {
      out.push_back(hi);
      out.push_back(lo);
    }
  };
  for (const auto& p : pts) {
    if (!std::isfinite(p.second)) continue;
    const int c = static_cast<int>((p.first - x0) / std::max(1e-300, x1 - x0) * columns);
    if (c != column) {
      flush();
      column = c;
      lo = hi = p;
    } else {
      if (p.second < lo.second) lo = p;
      if (p.second > hi.second) hi = p;
    }
  }
  flush();
  if (out.back() != pts.back() && std::isfinite(pts.back().second)) out.push_back(pts.back());
  return out;
}

std::string Header(int width, int height, const std::string& attrs) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" {2} {3}>\n<rect width=\"{0}\" height=\"{1}\" fill=\"#fff\"/>\n",
      width, height, kFont, attrs);
}

double Get(const nlohmann::json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

}  // namespace

std::string FormatNumber(double v) {
  if (!std::isfinite(v)) return "n/a";
  return fmt::format("{:.4g}", v);
}

std::string EscapeXml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string LineChartSvg(const LineChart& c) {
  const auto yfmt = c.y_format ? c.y_format : FormatNumber;
  const double left = 64, right = 16, top = 44, bottom = 40;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : c.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  const bool empty = !std::isfinite(x0);
  std::string clipped;
  if (c.clip_outliers && !empty) {
    std::vector<double> ys;
    for (const Series& s : c.series) {
      for (const auto& p : s.points) {
        if (std::isfinite(p.second)) ys.push_back(p.second);
      }
    }
    std::sort(ys.begin(), ys.end());
    const double p98 = ys[static_cast<size_t>(0.98 * static_cast<double>(ys.size() - 1))];
    if (p98 > y0 && y1 - y0 > 4 * (p98 - y0)) {
      clipped = fmt::format("axis clipped at {}: the largest value is {}",
                            yfmt(p98 + 0.25 * (p98 - y0)), yfmt(y1));
      y1 = p98 + 0.25 * (p98 - y0);
    }
  }
  if (empty) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) {
    const double pad = std::abs(y0) > 0 ? std::abs(y0) * 0.1 : 1;
    y0 -= pad;
    y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  auto X = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return top + (1 - (std::min(y, y1) - y0) / (y1 - y0)) * ph; };

  std::string out = Header(c.width, c.height,
                           fmt::format("class=\"chart\" data-chart=\"{}\" data-x0=\"{}\" "
                                       "data-x1=\"{}\" data-y0=\"{}\" data-y1=\"{}\"",
                                       EscapeXml(c.id), x0, x1, y0, y1));
  out += fmt::format("<text x=\"{}\" y=\"17\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                     left, EscapeXml(c.title));
  if (!clipped.empty()) {
    out += fmt::format(
        "<text class=\"clipped\" x=\"{}\" y=\"{}\" font-size=\"10\" "
        "text-anchor=\"end\" fill=\"#c62828\">{}</text>\n",
        left + pw, 17, EscapeXml(clipped));
  }
  // Grid and axes.
  for (double t : Ticks(y0, y1, 5)) {
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e6e6e6\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" font-size=\"11\" text-anchor=\"end\" fill=\"#555\">{5}"
        "</text>\n",
        left, left + pw, Y(t), left - 6, Y(t) + 4, EscapeXml(yfmt(t)));
  }
  for (double t : Ticks(x0, x1, 6)) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#e6e6e6\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">{4}"
        "</text>\n",
        X(t), top, top + ph, top + ph + 15, FormatNumber(t));
  }
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", left,
      top, pw, ph);
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" "
      "fill=\"#333\">{}</text>\n",
      left + pw / 2, c.height - 6, EscapeXml(c.x_label));
  out += fmt::format(
      "<text transform=\"translate(13 {}) rotate(-90)\" font-size=\"11\" "
      "text-anchor=\"middle\" fill=\"#333\">{}</text>\n",
      top + ph / 2, EscapeXml(c.y_label));
  for (const Marker& m : c.markers) {
    if (m.x < x0 || m.x > x1) continue;
    out += fmt::format(
        "<g class=\"marker\" data-x=\"{0}\" data-label=\"{1}\"><line x1=\"{2:.1f}\" "
        "x2=\"{2:.1f}\" y1=\"{3}\" y2=\"{4}\" stroke=\"{5}\" stroke-dasharray=\"4 3\"/>"
        "<text x=\"{6:.1f}\" y=\"{7}\" font-size=\"10\" fill=\"{5}\">{1}</text></g>\n",
        m.x, EscapeXml(m.label), X(m.x), top, top + ph, m.color, X(m.x) + 3, top + 10);
  }
  // Series, then the legend with each series' last value.
  double legend_x = left;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const auto pts = Reduce(s.points, x0, x1, static_cast<int>(pw));
    std::string xy, path;
    const std::pair<double, double>* last = nullptr;
    bool pen_down = false;
    for (const auto& p : pts) {
      if (!std::isfinite(p.second)) {
        pen_down = false;
        continue;
      }
      xy += fmt::format("{}{},{}", xy.empty() ? "" : " ", p.first, p.second);
      if (s.dots) {
        path += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", X(p.first),
                            Y(p.second), s.color);
      } else {
        path += fmt::format("{}{:.1f},{:.1f}", pen_down ? " L" : " M", X(p.first), Y(p.second));
      }
      pen_down = true;
      last = &p;
    }
    std::string body = s.dots ? path
                              : fmt::format(
                                    "<path d=\"{}\" fill=\"none\" stroke=\"{}\" "
                                    "stroke-width=\"1.6\" stroke-linejoin=\"round\"/>",
                                    path, s.color);
    out += fmt::format(
        "<g class=\"series\" data-series=\"{}\" data-n=\"{}\" data-last-x=\"{}\" "
        "data-last-y=\"{}\" data-color=\"{}\" data-xy=\"{}\">{}</g>\n",
        EscapeXml(s.name), s.points.size(), last ? fmt::format("{}", last->first) : "",
        last ? fmt::format("{}", last->second) : "", s.color, xy, body);
    const std::string text =
        s.name + (last ? ": " + yfmt(last->second) + " at " + FormatNumber(last->first) : "");
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"25\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" "
        "y=\"34\" font-size=\"11\" fill=\"#333\">{}</text>\n",
        legend_x, s.color, legend_x + 14, EscapeXml(text));
    legend_x += 14 + 6.2 * static_cast<double>(text.size()) + 16;
  }
  if (empty) {
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"13\" text-anchor=\"middle\" "
        "fill=\"#888\">no data</text>\n",
        left + pw / 2, top + ph / 2);
  }
  return out + "</svg>\n";
}

const std::vector<Bucket>& GoodputBuckets() {
  static const std::vector<Bucket> b = {
      {"productive", "productive training", "#2e7d32"},
      {"checkpoint", "checkpoint stalls", "#1565c0"},
      {"lost", "lost work (redone)", "#c62828"},
      {"detection", "failure detection", "#ef6c00"},
      {"restart", "restart", "#8e24aa"},
      {"down", "down (no launcher)", "#424242"},
      {"idle", "idle / other", "#b0b0b0"},
  };
  return b;
}

std::string GoodputBarSvg(const nlohmann::json& g, int width) {
  const int height = 104;
  const double left = 8, right = 8, pw = width - left - right;
  const double wall = Get(g, "wall_s", 0);
  const nlohmann::json times = g.value("time_s", nlohmann::json::object());
  std::string out = Header(width, height,
                           fmt::format("class=\"chart\" data-chart=\"goodput\" data-wall-s=\"{}\" "
                                       "data-effective=\"{}\"",
                                       wall, Get(g, "effective_training_ratio", 0)));
  out += fmt::format(
      "<text x=\"{}\" y=\"16\" font-size=\"14\" font-weight=\"bold\">Where the wall time went: "
      "{:.1f} s, {:.1f}% effective training time</text>\n",
      left, wall, 100 * Get(g, "effective_training_ratio", 0));
  double x = left;
  double legend_x = left, legend_y = 64;
  for (const Bucket& b : GoodputBuckets()) {
    const double s = Get(times, b.key, 0);
    const double w = wall > 0 ? s / wall * pw : 0;
    out += fmt::format(
        "<rect class=\"bucket\" data-bucket=\"{}\" data-seconds=\"{}\" x=\"{:.2f}\" y=\"26\" "
        "width=\"{:.2f}\" height=\"26\" fill=\"{}\"><title>{}: {:.1f} s ({:.1f}%)</title></rect>\n",
        b.key, s, x, w, b.color, b.label, s, wall > 0 ? 100 * s / wall : 0.0);
    x += w;
    if (s <= 0 && std::string(b.key) == "down") continue;  // only runs with several launches
    const std::string text =
        fmt::format("{} {:.1f} s ({:.1f}%)", b.label, s, wall > 0 ? 100 * s / wall : 0.0);
    if (legend_x + 16 + 6.0 * static_cast<double>(text.size()) > width) {  // next row
      legend_x = left;
      legend_y += 18;
    }
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" "
        "y=\"{}\" font-size=\"11\" fill=\"#333\">{}</text>\n",
        legend_x, legend_y, b.color, legend_x + 14, legend_y + 9, EscapeXml(text));
    legend_x += 14 + 6.0 * static_cast<double>(text.size()) + 12;
  }
  return out + "</svg>\n";
}

std::string GoodputTimelineSvg(const nlohmann::json& g, const std::vector<double>& checkpoint_unix,
                               int width) {
  const nlohmann::json gens = g.value("generations", nlohmann::json::array());
  const nlohmann::json fails = g.value("failures", nlohmann::json::array());
  const nlohmann::json segs = g.value("segments", nlohmann::json::array());
  const double wall = std::max(1e-9, Get(g, "wall_s", 0));
  const double run_start = segs.empty() ? 0 : Get(segs[0], "start_unix", 0);
  const double left = 110, right = 16, top = 40, row = 20, pw = width - left - right;
  const int rows = std::max<int>(1, static_cast<int>(gens.size()));
  const int height = static_cast<int>(top + row * rows + 40);
  auto X = [&](double t) { return left + std::clamp(t / wall, 0.0, 1.0) * pw; };
  std::string out = Header(width, height,
                           fmt::format("class=\"chart\" data-chart=\"timeline\" data-wall-s=\"{}\" "
                                       "data-generations=\"{}\" data-failures=\"{}\"",
                                       wall, gens.size(), fails.size()));
  out += fmt::format(
      "<text x=\"8\" y=\"16\" font-size=\"14\" font-weight=\"bold\">Timeline: launches, "
      "generations and failures</text>\n");
  auto colour = [](const char* key) {
    for (const Bucket& b : GoodputBuckets()) {
      if (std::string(b.key) == key) return b.color;
    }
    return "#000";
  };
  auto span = [&](int r, double from, double to, const char* bucket) {
    if (!(to > from)) return;
    out += fmt::format(
        "<rect class=\"span\" data-bucket=\"{}\" data-from=\"{:.3f}\" data-to=\"{:.3f}\" "
        "x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} "
        "{:.1f}..{:.1f} s</title></rect>\n",
        bucket, from, to, X(from), top + r * row + 3, std::max(0.5, X(to) - X(from)), row - 6,
        colour(bucket), bucket, from, to);
  };
  // The failure that ended a generation (segment, generation), if any.
  auto failure_of = [&](const nlohmann::json& gen) -> const nlohmann::json* {
    const nlohmann::json* found = nullptr;
    for (const auto& f : fails) {
      if (f.value("segment", 0) == gen.value("segment", 0) &&
          f.value("generation", 0) == gen.value("generation", 0) &&
          f.value("kind", std::string()) != "corrupt-checkpoint") {
        found = &f;
      }
    }
    return found;
  };
  for (size_t i = 0; i < gens.size(); ++i) {
    const auto& gen = gens[i];
    const int r = static_cast<int>(i);
    const int seg = gen.value("segment", 0);
    out += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\" fill=\"#333\">launch "
        "{} gen {}</text>\n",
        left - 6, top + r * row + 14, seg + 1, gen.value("generation", 0));
    const double start = Get(gen, "start_s", 0), ready = Get(gen, "ready_s", -1);
    const double end = Get(gen, "end_s", -1) >= 0 ? Get(gen, "end_s", -1) : wall;
    const double last_at = Get(gen, "last_step_at", -1);
    const int64_t resume = gen.value("resume_step", int64_t{-1});
    const int64_t last = gen.value("last_step", int64_t{-1});
    // Before this generation trained: time with no launcher (a new launch), then start-up (the
    // first generation) or restart (from the previous failure's detection).
    double from = start;
    if (i > 0 && gens[i - 1].value("segment", 0) != seg && seg < static_cast<int>(segs.size())) {
      const double prev_end = Get(segs[seg - 1], "end_unix", run_start) - run_start;
      const double seg_start = Get(segs[seg], "start_unix", run_start) - run_start;
      span(r, prev_end, seg_start, "down");
      from = seg_start;
    } else if (i > 0) {
      const nlohmann::json* pf = failure_of(gens[i - 1]);
      from = pf ? Get(*pf, "time_s", start) : start;
    }
    span(r, from, ready >= 0 ? ready : end, i == 0 ? "idle" : "restart");
    if (ready < 0) continue;
    // Steps kept by the run: up to the step a later generation resumed from.
    int64_t kept = last;
    for (size_t j = i + 1; j < gens.size(); ++j) {
      if (Get(gens[j], "ready_s", -1) >= 0)
        kept = std::min(kept, gens[j].value("resume_step", kept));
    }
    const double trained_until = last_at >= 0 ? last_at : ready;
    double keep_at = trained_until;
    if (last > resume && kept < last) {
      keep_at = ready + (trained_until - ready) *
                            static_cast<double>(std::max(kept, resume) - resume) /
                            static_cast<double>(last - resume);
    }
    span(r, ready, keep_at, "productive");
    const nlohmann::json* f = failure_of(gen);
    if (f) {
      const double detected = Get(*f, "time_s", end);
      const double failed_at = detected - Get(*f, "detection_s", 0);
      span(r, keep_at, std::max(keep_at, failed_at), "lost");
      span(r, std::max(keep_at, failed_at), detected, "detection");
    } else {
      span(r, keep_at, trained_until, "lost");
      span(r, trained_until, end, "idle");
    }
  }
  for (double t : checkpoint_unix) {
    const double at = t - run_start;
    if (at < 0 || at > wall) continue;
    out += fmt::format(
        "<line class=\"checkpoint\" data-t=\"{:.3f}\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" "
        "y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"><title>checkpoint committed at {:.1f} "
        "s</title></line>\n",
        at, X(at), X(at), top - 6, top - 1, colour("checkpoint"), at);
  }
  int n = 0;
  for (const auto& f : fails) {
    ++n;
    const double t = Get(f, "time_s", 0);
    const std::string kind = f.value("kind", std::string("?"));
    const int rank = f.value("rank", -1);
    const std::string host = f.value("host", std::string());
    const std::string who = rank >= 0 ? fmt::format("rank {}", rank) : "rank ?";
    out += fmt::format(
        "<g class=\"failure\" data-n=\"{0}\" data-kind=\"{1}\" data-rank=\"{2}\" data-host=\"{3}\" "
        "data-t=\"{4:.3f}\"><line x1=\"{5:.1f}\" x2=\"{5:.1f}\" y1=\"{6}\" y2=\"{7:.1f}\" "
        "stroke=\"#c62828\" stroke-dasharray=\"3 2\"/><circle cx=\"{5:.1f}\" cy=\"{8}\" r=\"8\" "
        "fill=\"#c62828\"/><text x=\"{5:.1f}\" y=\"{9}\" font-size=\"10\" fill=\"#fff\" "
        "text-anchor=\"middle\">{0}</text><title>{0}: {1}, {10}{11} at {4:.1f} s</title></g>\n",
        n, EscapeXml(kind), rank, EscapeXml(host), t, X(t), top - 14, top + rows * row, top - 22,
        top - 18, who, host.empty() ? "" : " on " + EscapeXml(host));
  }
  // Axis: run seconds.
  const double axis_y = top + rows * row + 6;
  for (double t : Ticks(0, wall, 8)) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#999\"/><text "
        "x=\"{0:.1f}\" y=\"{3}\" font-size=\"11\" text-anchor=\"middle\" "
        "fill=\"#555\">{4}</text>\n",
        X(t), axis_y, axis_y + 4, axis_y + 16, FormatNumber(t));
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" "
      "fill=\"#333\">seconds since the run's first launch</text>\n",
      left + pw / 2, height - 4);
  return out + "</svg>\n";
}

}  // namespace tenax::report
