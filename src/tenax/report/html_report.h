// `tenax report RUN_FOLDER`: one self-contained HTML file about a run (no network needed to view
// it: the charts are inline SVG drawn by svg.h, the styles and the small hover script are
// inline), plus each chart as its own SVG file for pasting into a document. The launcher writes
// it at the end of every run.
// Contents: a summary (steps, losses, throughput, effective training time, failures); loss and
// validation loss, learning rate, gradient norm, tokens/s and MFU (FLOP/s on CPU) and peak
// memory over steps, with loss spikes and restarts marked; the goodput split and the timeline of
// generations with every failure by kind and rank; the failure, straggler, loss-spike and
// checkpoint tables; the config.
// Non-goals: comparing runs; live updates (the launcher's live page does that, live.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/report/run_data.h"

namespace tenax::report {

struct ChartFile {
  std::string id;   // "loss"
  std::string svg;  // the chart, standalone
};

// The report page and its charts for `data`.
std::string ReportHtml(const RunData& data, std::vector<ChartFile>* charts);

struct WrittenReport {
  std::string html_path;               // <run>/report.html unless `html_path` was given
  std::vector<std::string> svg_paths;  // <run>/report/<chart>.svg
};

// Reads the run folder and writes the report atomically. `goodput_path` empty:
// <run>/goodput.json. `html_path` empty: <run>/report.html (the SVG files go to a `report`
// folder beside the HTML file).
Result<WrittenReport> WriteReport(const std::string& run_dir, const std::string& goodput_path = "",
                                  const std::string& html_path = "");

// The end of a run: writes the report of `run_dir` (nothing when empty) and logs where it is, or
// why it could not be written, prefixed with `who` ("launch"). Never fails the run.
void WriteReportAtEnd(const std::string& run_dir, const std::string& goodput_path,
                      const std::string& who);

}  // namespace tenax::report
