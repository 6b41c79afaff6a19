// Charts as self-contained SVG text, drawn here so that a report needs no chart library and no
// network: line charts over steps (loss, learning rate, ...) and the goodput charts of a run
// (the wall time split into buckets, and the timeline of generations with every failure).
// Every chart carries its numbers as data attributes (data-chart, data-series, data-n,
// data-last-x, data-last-y, data-xy; data-bucket, data-seconds; data-kind, data-rank), for the
// report's small script (tooltips) and for tests.
// Non-goals: interactivity beyond hover, log axes, more than a few thousand points (longer
// series are reduced to the minimum and maximum of each pixel column).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tenax::report {

struct Series {
  std::string name;
  std::string color;                              // CSS colour
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y leaves a gap
  bool dots = false;                              // markers instead of a line (evaluations)
};

// A vertical line at x with a short label (a failure, a loss spike).
struct Marker {
  double x = 0;
  std::string label;
  std::string color;
};

struct LineChart {
  std::string id;  // data-chart and the file name: "loss" -> loss.svg
  std::string title;
  std::string x_label = "step";
  std::string y_label;
  std::vector<Series> series;
  std::vector<Marker> markers;
  int width = 600, height = 260;
  // A few points far above the rest (a loss spike) would flatten everything else: the axis then
  // ends a little above the 98th percentile, and the chart says so. The data attributes keep the
  // true values.
  bool clip_outliers = false;
  // Tick and legend labels of y values; default: 4 significant digits.
  std::function<std::string(double)> y_format;
};

std::string LineChartSvg(const LineChart& chart);

// The goodput buckets in drawing order, with their colours and names for people.
struct Bucket {
  const char* key;  // goodput.json time_s key
  const char* label;
  const char* color;
};
const std::vector<Bucket>& GoodputBuckets();

// One bar split into goodput.json's time_s buckets, with seconds and percentages.
std::string GoodputBarSvg(const nlohmann::json& goodput, int width = 960);
// The run's wall time left to right, one row per generation (launches and restarts): start-up
// and restart, productive training, work that a restart redid (lost), failure detection, time
// with no launcher (down); each failure a numbered line (data-kind, data-rank, data-host), each
// committed checkpoint a tick. Totals are exact (goodput.json); where lost work starts inside a
// generation is interpolated by step.
// `checkpoint_unix`: commit times of the checkpoints on disk.
std::string GoodputTimelineSvg(const nlohmann::json& goodput,
                               const std::vector<double>& checkpoint_unix, int width = 960);

// "1.235", "0.0003", "1.2e+06": 4 significant digits without trailing zeros.
std::string FormatNumber(double v);
// Text safe inside HTML and SVG (& < > " ').
std::string EscapeXml(const std::string& text);

}  // namespace tenax::report
