#include "tenax/report/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "tenax/core/fs.h"
#include "tenax/report/html_report.h"
#include "tenax/report/run_data.h"

namespace tenax::report {
namespace {

Status RunReport(const std::string& run_dir, const std::string& goodput_file,
                 const std::string& out) {
  TENAX_ASSIGN_OR_RETURN(WrittenReport r, WriteReport(run_dir, goodput_file, out));
  std::printf("tenax report: wrote %s (%zu charts as SVG in %s)\n", r.html_path.c_str(),
              r.svg_paths.size(),
              ParentDir(r.svg_paths.empty() ? r.html_path : r.svg_paths[0]).c_str());
  TENAX_ASSIGN_OR_RETURN(RunData d, LoadRunData(run_dir, goodput_file));
  if (d.goodput.is_object()) {
    std::printf("  effective training time %.1f%% of %.1f s wall (%zu failure(s), %d restart(s))\n",
                100 * d.goodput.value("effective_training_ratio", 0.0),
                d.goodput.value("wall_s", 0.0),
                d.goodput.value("failures", nlohmann::json::array()).size(),
                d.goodput.value("restarts", 0));
  }
  if (!d.steps.empty()) {
    std::printf("  step %lld, train loss %.4f%s\n", static_cast<long long>(d.steps.back().step),
                d.steps.back().loss,
                d.evals.empty()
                    ? ""
                    : fmt::format(", validation loss {:.4f}", d.evals.back().val_loss).c_str());
  }
  return Status::Ok();
}

}  // namespace

void AddCommands(CLI::App& app, cli::Commands& commands) {
  struct Flags {
    std::string run_dir, goodput_file, html_out;
  };
  auto f = std::make_shared<Flags>();
  auto* report = app.add_subcommand(
      "report", "write a run's HTML report (charts of loss, throughput, goodput, failures)");
  report->add_option("run_folder", f->run_dir, "the run folder, e.g. runs/demo")->required();
  report->add_option("--goodput-file", f->goodput_file,
                     "the launcher's goodput report (default: goodput.json in the run folder)");
  report->add_option("--out", f->html_out,
                     "the HTML file to write (default: report.html in the run folder; the SVG "
                     "charts go to a report/ folder beside it)");
  commands.Add(
      report, cli::FromStatus([f] { return RunReport(f->run_dir, f->goodput_file, f->html_out); }));
}

}  // namespace tenax::report
