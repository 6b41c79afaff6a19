// The run report and the live page in a real browser (Debian's chromium, headless, started here):
// a launch with a spare survives a crash, a hang and a loss spike; while it hangs, the live page
// is loaded from the launcher; at the end, the report.html the launcher wrote is loaded from
// disk. Each page must render without script errors (the browser's console and the page's own
// error hook), its charts must carry the run's numbers (read from the DOM after the scripts ran:
// points, last values, goodput seconds, failures by kind and rank), and a screenshot of each is
// saved as docs/screenshots/{report,live}.png ($TENAX_SCREENSHOT_DIR overrides the folder).
// Skips, saying why, only when chromium cannot start at all (scripts/setup installs it).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <thread>

#include "tenax/core/net.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

std::string Chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

struct Page {
  int exit_code = -1;
  std::string dom;
  std::string console;  // the browser's log: console messages appear as "CONSOLE" lines
};

// Loads `url` headless; with `screenshot`, saves a PNG of the page instead of dumping the DOM.
Page Load(const TempDir& dir, const std::string& url, const std::string& screenshot = "",
          int height = 2600) {
  const std::string flags =
      "--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--hide-scrollbars --enable-logging=stderr --v=0 --user-data-dir=" +
      dir / "chromium-profile" + " --window-size=1300," + std::to_string(height) + " ";
  const std::string what = screenshot.empty() ? "--dump-dom " : "--screenshot=" + screenshot + " ";
  const std::string log = dir / "chromium.log";
  Page p;
  CommandResult r = RunCommand("timeout 120 " + Chromium() + " " + flags + what + "'" + url +
                                   "' > " + dir / "dom.html" + " 2> " + log,
                               dir.path());
  p.exit_code = r.exit_code;
  p.dom = ReadFile(dir / "dom.html");
  p.console = ReadFile(log);
  return p;
}

// Console messages the page caused (not the browser's own complaints about D-Bus and the like).
std::vector<std::string> ConsoleErrors(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos) {
      out.push_back(line);
    }
  }
  return out;
}

// The attribute `attr` of the first element whose tag starts with `open` (e.g. "<body").
std::string Attr(const std::string& dom, const std::string& open, const std::string& attr) {
  const size_t at = dom.find(open);
  if (at == std::string::npos) return "";
  const size_t end = dom.find('>', at);
  const std::string key = " " + attr + "=\"";
  const size_t k = dom.find(key, at);
  if (k == std::string::npos || k > end) return "";
  const size_t v = k + key.size();
  return dom.substr(v, dom.find('"', v) - v);
}

// Every value of `attr` on elements whose opening tag contains `marker`.
std::vector<std::string> Attrs(const std::string& dom, const std::string& marker,
                               const std::string& attr) {
  std::vector<std::string> out;
  for (size_t at = dom.find(marker); at != std::string::npos; at = dom.find(marker, at + 1)) {
    const size_t open = dom.rfind('<', at);
    const size_t end = dom.find('>', at);
    const std::string tag = dom.substr(open, end - open);
    const std::string key = " " + attr + "=\"";
    const size_t k = tag.find(key);
    if (k == std::string::npos) continue;
    const size_t v = k + key.size();
    out.push_back(tag.substr(v, tag.find('"', v) - v));
  }
  return out;
}

bool IsPng(const std::string& path) {
  const std::string head = ReadFile(path).substr(0, 8);
  return head == std::string("\x89PNG\r\n\x1a\n", 8);
}

std::string ScreenshotDir() {
  if (const char* d = std::getenv("TENAX_SCREENSHOT_DIR")) return d;
  return SourceDir() + "/docs/screenshots";
}

TEST(ReportBrowser, ReportAndLivePageRenderWithTheRunsNumbers) {
  if (Chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it)";
  TempDir dir;
  if (Load(dir, "about:blank").exit_code != 0) {
    GTEST_SKIP() << "chromium does not start here: " << ReadFile(dir / "chromium.log");
  }
  std::filesystem::create_directories(ScreenshotDir());
  const int port = FreeTcpPort();
  const std::string status = dir / "status.json";
  // Generation 0: rank 1 crashes at step 12 (the spare takes its rank). Generation 1: rank 0
  // hangs at step 25 (detected after 30 s of silence: the live page is read meanwhile).
  // Generation 2: rank 0 reports a loss spike at step 33 (skipped) and the run finishes.
  const std::string launch =
      "launch --nproc-per-node 2 --spares 1 --max-restarts 2 --hang-timeout 30 "
      "--flight-dump-timeout 1 --status-file " +
      status + " --metrics-port " + std::to_string(port) +
      " --inject crash:rank=1:step=12,hang:rank=0:step=25:gen=1,spike:rank=0:step=33:gen=2 -- "
      "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
      "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
      "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
      "--set data.synthetic.order=1 --set metrics.eval_tokens=1024 --set metrics.eval_interval=10 "
      "--set metrics.progress=never --set optimizer.lr=3e-3 --set checkpoint.interval=5 "
      "--set training.steps=40 --set training.local_batch_size=4 "
      "--set training.loss_spike_factor=3 --set training.on_loss_spike=skip "
      "--set job.dump_folder=" +
      dir.path() + " --set job.name=watched";
  CommandResult run;
  std::thread t([&] { run = RunTenax(launch, dir.path()); });

  // The live page, while generation 1 hangs at step 24 (its last finished step). The step comes
  // from the ranks' heartbeats at once, the training section (loss history) from metrics.jsonl,
  // which the launcher re-reads about once a second: wait until that too has reached step 24, or
  // the page may show the history a few steps behind (19 points once, on a loaded machine).
  const bool hanging = WaitFor(
      [&] {
        auto j = nlohmann::json::parse(ReadFile(status), nullptr, false);
        return j.is_object() && j.value("generation", 0) == 1 && j.value("step", 0) == 24 &&
               j.value("ranks_alive", 0) == 2 && j.contains("training") &&
               j["training"].is_object() && j["training"].value("step", 0) == 24;
      },
      300);
  Page live, live_shot;
  if (hanging) {
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
    live = Load(dir, url);
    live_shot = Load(dir, url, ScreenshotDir() + "/live.png", 1300);
  }
  t.join();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(hanging) << "the run never hung at step 24 in generation 1\n" << run.output;

  ASSERT_EQ(live.exit_code, 0) << live.console;
  EXPECT_EQ(ConsoleErrors(live.console), std::vector<std::string>{}) << live.dom;
  EXPECT_EQ(Attr(live.dom, "<body", "data-script-error"), "");
  EXPECT_GE(std::atoi(Attr(live.dom, "<body", "data-updates").c_str()), 1) << live.dom;
  EXPECT_EQ(Attr(live.dom, "<body", "data-step"), "24") << live.dom;
  EXPECT_NE(live.dom.find("<div class=\"v\">2 / 2</div><div class=\"k\">ranks alive"),
            std::string::npos)
      << live.dom;
  EXPECT_NE(live.dom.find("<td>crash</td>"), std::string::npos) << live.dom;  // the failure table
  EXPECT_GE(std::atoi(Attr(live.dom, "<svg id=\"loss\"", "data-points").c_str()), 20);
  EXPECT_EQ(live_shot.exit_code, 0) << live_shot.console;
  EXPECT_TRUE(IsPng(ScreenshotDir() + "/live.png"));

  // The report the launcher wrote at the end.
  const std::string run_dir = dir / "watched";
  EXPECT_NE(run.output.find("launch: report written to " + run_dir + "/report.html"),
            std::string::npos)
      << run.output;
  const nlohmann::json goodput = nlohmann::json::parse(ReadFile(run_dir + "/goodput.json"));
  const std::vector<nlohmann::json> metrics = ReadJsonl(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> steps;
  for (const auto& m : metrics) {
    if (m.contains("loss")) steps.push_back(m);
  }
  ASSERT_EQ(steps.size(), 40u);
  const std::string url = "file://" + run_dir + "/report.html";
  const Page report = Load(dir, url);
  ASSERT_EQ(report.exit_code, 0) << report.console;
  const std::string& dom = report.dom;
  EXPECT_EQ(ConsoleErrors(report.console), std::vector<std::string>{});
  EXPECT_EQ(Attr(dom, "<body", "data-rendered"), "ok") << dom.substr(0, 2000);
  EXPECT_EQ(Attr(dom, "<body", "data-script-error"), "");
  EXPECT_EQ(Attr(dom, "<body", "data-charts"), "8");
  // Every series was laid out with a width (the browser drew it).
  for (const std::string& w : Attrs(dom, "class=\"series\"", "data-drawn-width")) {
    EXPECT_GT(std::stod(w), 0) << w;
  }
  EXPECT_EQ(Attrs(dom, "class=\"series\"", "data-drawn-width").size(), 7u);
  // The loss chart: one point per logged step, ending at the last logged loss.
  const std::vector<std::string> n = Attrs(dom, "data-series=\"train loss\"", "data-n");
  const std::vector<std::string> last = Attrs(dom, "data-series=\"train loss\"", "data-last-y");
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0], "40");
  EXPECT_NEAR(std::stod(last[0]), steps.back()["loss"].get<double>(), 1e-9);
  const std::vector<std::string> lr = Attrs(dom, "data-series=\"lr\"", "data-last-y");
  ASSERT_EQ(lr.size(), 1u);
  EXPECT_NEAR(std::stod(lr[0]), steps.back()["lr"].get<double>(), 1e-15);
  // Goodput: each bucket's seconds as goodput.json says, and the failures by kind and rank.
  const auto buckets = Attrs(dom, "class=\"bucket\"", "data-bucket");
  const auto seconds = Attrs(dom, "class=\"bucket\"", "data-seconds");
  ASSERT_EQ(buckets.size(), 7u);
  for (size_t i = 0; i < buckets.size(); ++i) {
    EXPECT_NEAR(std::stod(seconds[i]), goodput["time_s"][buckets[i]].get<double>(), 1e-6)
        << buckets[i];
  }
  const auto kinds = Attrs(dom, "class=\"failure\"", "data-kind");
  const auto ranks = Attrs(dom, "class=\"failure\"", "data-rank");
  ASSERT_EQ(kinds.size(), goodput["failures"].size());
  ASSERT_EQ(kinds.size(), 2u) << goodput.dump(2);
  EXPECT_EQ(kinds[0], "crash") << goodput.dump(2) << run.output;
  EXPECT_EQ(ranks[0], "1");
  EXPECT_EQ(kinds[1], "hang") << goodput.dump(2) << run.output;
  EXPECT_EQ(ranks[1], std::to_string(goodput["failures"][1]["rank"].get<int>()));
  EXPECT_NE(dom.find("<table id=\"spikes\">"), std::string::npos);
  EXPECT_NE(dom.find(">33</td>"), std::string::npos);  // the spike's step
  const Page shot = Load(dir, url, ScreenshotDir() + "/report.png", 2300);
  EXPECT_EQ(shot.exit_code, 0) << shot.console;
  EXPECT_TRUE(IsPng(ScreenshotDir() + "/report.png"));
}

}  // namespace
}  // namespace tenax::testing
