// The report module against a run folder written here: what is read back, what the charts say
// (their data attributes, which the browser test also reads), where the timeline puts each
// interval, the self-containment of the HTML, and the live endpoints over a real socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "tenax/core/fs.h"
#include "tenax/core/temp_dir.h"
#include "tenax/report/html_report.h"
#include "tenax/report/http_server.h"
#include "tenax/report/live.h"
#include "tenax/report/run_data.h"
#include "tenax/report/svg.h"
#include "tenax/report/testing_prometheus.h"

namespace tenax::report {
namespace {

using tenax::testing::TempDir;

// A run of 60 steps: generation 0 trained steps 1..30 (ready at 5 s, step 30 at 50 s) and was
// killed by a crash of rank 1 detected at 52 s (1 s after it happened); generation 1 resumed
// from the checkpoint at step 20, was ready at 60 s and trained to step 60 at 95 s.
nlohmann::json Goodput() {
  return nlohmann::json::parse(R"({
    "format": "tenax-goodput", "version": 2, "wall_s": 100.0, "exit_code": 0, "restarts": 1,
    "launches": 1, "step": 60, "tokens_per_s": 1000, "effective_training_ratio": 0.6,
    "time_s": {"productive": 60, "checkpoint": 4, "lost": 16, "detection": 1, "restart": 8,
               "down": 0, "idle": 11},
    "steps_redone": 10, "failures_by_kind": {"crash": 1},
    "failures": [{"time_s": 52.0, "segment": 0, "generation": 0, "rank": 1, "slot": 1,
                  "host": "node7", "kind": "crash", "cause": "rank 1 was killed by signal 9",
                  "exit_code": 137, "step": 30, "detection_s": 1.0, "recovery_s": 8.0,
                  "resumed_from": 20, "replacement_slot": 2}],
    "stragglers": [{"time_s": 70.0, "generation": 1, "rank": 0, "slot": 0, "host": "node7",
                    "step": 40, "compute_s": 0.9, "median_s": 0.3, "segment": 0}],
    "loss_spikes": [],
    "generations": [
      {"segment": 0, "generation": 0, "start_s": 0.0, "ready_s": 5.0, "end_s": 52.5,
       "resume_step": 0, "last_step": 30, "last_step_at": 50.0, "steps_s": 45, "checkpoint_s": 2,
       "exit_code": 137},
      {"segment": 0, "generation": 1, "start_s": 52.5, "ready_s": 60.0, "end_s": 100.0,
       "resume_step": 20, "last_step": 60, "last_step_at": 95.0, "steps_s": 35,
       "checkpoint_s": 2, "exit_code": 0}],
    "segments": [{"start_unix": 1700000000.0, "end_unix": 1700000100.0, "ended": true,
                  "exit_code": 0, "pid": 42, "host": "node7"}]})");
}

std::string MetricsJsonl() {
  std::string out;
  for (int step = 1; step <= 60; ++step) {
    nlohmann::json j = {
        {"step", step},         {"loss", 4.0 - step * 0.03},          {"lr", 1e-3 * step / 60},
        {"grad_norm", 1.5},     {"tokens_per_s", 1000 + step},        {"flops_per_s", 2e9},
        {"mfu", nullptr},       {"mem_peak_bytes", int64_t{3} << 29}, {"step_time_s", 0.5},
        {"tokens", step * 512}, {"time", 1700000000.0 + step}};
    out += j.dump() + "\n";
    if (step % 20 == 0) {
      out += nlohmann::json({{"step", step},
                             {"val_loss", 4.1 - step * 0.03},
                             {"val_tokens", 256},
                             {"time", 1700000000.5 + step}})
                 .dump() +
             "\n";
    }
  }
  return out + "{\"step\": 61, \"lo";  // a crash mid-line leaves this behind
}

void MakeRun(const TempDir& dir) {
  dir.Write("metrics.jsonl", MetricsJsonl());
  dir.Write("goodput.json", Goodput().dump(2));
  dir.Write("loss_spikes.json",
            R"({"spikes": [{"step": 45, "loss": 9.0, "median": 2.7, "action": "skip",
                "generation": 1}]})");
  dir.Write("config.toml", "[checkpoint]\nfolder = \"ckpt\"\n");
  for (int step : {20, 40, 60}) {
    const std::string d = dir / ("ckpt/step_000000" + std::to_string(step));
    ASSERT_TRUE(LocalFs().CreateDirs(d).ok());
    ASSERT_TRUE(LocalFs().WriteFileAtomic(d + "/COMMITTED", "manifest_crc32=0\n").ok());
  }
  ASSERT_TRUE(LocalFs().CreateDirs(dir / "ckpt/step_00000050").ok());  // not committed
}

// Attribute values of every element named `element` that carries `attr` (a scan, not a regex:
// std::regex recurses per character and overflows the stack on a long data-xy).
std::vector<std::string> Attrs(const std::string& svg, const std::string& element,
                               const std::string& attr) {
  std::vector<std::string> out;
  const std::string open = "<" + element + " ", key = " " + attr + "=\"";
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t end = svg.find('>', at);
    const size_t k = svg.find(key, at);
    if (k == std::string::npos || k > end) continue;
    const size_t v = k + key.size();
    out.push_back(svg.substr(v, svg.find('"', v) - v));
  }
  return out;
}

TEST(RunData, ReadsEveryFileAndSkipsATornLine) {
  TempDir dir;
  MakeRun(dir);
  auto d = LoadRunData(dir.path());
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->steps.size(), 60u);
  EXPECT_EQ(d->steps.back().step, 60);
  EXPECT_DOUBLE_EQ(d->steps.back().loss, 4.0 - 60 * 0.03);
  EXPECT_FALSE(d->steps.back().mfu.has_value());
  ASSERT_EQ(d->evals.size(), 3u);
  EXPECT_DOUBLE_EQ(d->evals[2].val_loss, 4.1 - 60 * 0.03);
  EXPECT_EQ(d->goodput["restarts"], 1);
  EXPECT_EQ(d->loss_spikes.size(), 1u);
  EXPECT_EQ(d->checkpoint_dir, dir / "ckpt");
  ASSERT_EQ(d->checkpoints.size(), 3u);  // step 50 has no COMMITTED marker
  EXPECT_EQ(d->checkpoints[2].step, 60);
  EXPECT_GT(d->checkpoints[2].committed_unix, 1.6e9);
  EXPECT_FALSE(LoadRunData(dir / "missing").ok());
}

TEST(RunData, LiveTrainingIsTheNewestStep) {
  TempDir dir;
  MakeRun(dir);
  const nlohmann::json t = ReadLiveTraining(dir.path());
  EXPECT_EQ(t["step"], 60);
  EXPECT_EQ(t["tokens"], 60 * 512);
  EXPECT_DOUBLE_EQ(t["loss"].get<double>(), 4.0 - 60 * 0.03);
  EXPECT_DOUBLE_EQ(t["val_loss"].get<double>(), 4.1 - 60 * 0.03);
  EXPECT_FALSE(t.contains("mfu"));
  EXPECT_EQ(t["history"].size(), 60u);
  EXPECT_EQ(t["last_checkpoint_step"], 60);
  EXPECT_TRUE(ReadLiveTraining(dir / "nothing").empty());
}

TEST(Svg, LineChartCarriesItsNumbersAndReducesLongSeries) {
  LineChart c;
  c.id = "loss";
  c.title = "Loss";
  Series s{"train loss", "#000", {}, false};
  for (int i = 0; i < 100000; ++i) s.points.emplace_back(i, std::sin(i * 0.001));
  s.points[500].second = std::nan("");  // a gap, not a point
  c.series.push_back(s);
  const std::string svg = LineChartSvg(c);
  EXPECT_EQ(Attrs(svg, "svg", "data-chart"), std::vector<std::string>{"loss"});
  EXPECT_EQ(Attrs(svg, "g", "data-n"), std::vector<std::string>{"100000"});
  EXPECT_EQ(Attrs(svg, "g", "data-last-x"), std::vector<std::string>{"99999"});
  EXPECT_DOUBLE_EQ(std::stod(Attrs(svg, "g", "data-last-y")[0]), std::sin(99999 * 0.001));
  // Drawn: at most the lowest and highest point per pixel column, plus the last.
  const std::string xy = Attrs(svg, "g", "data-xy")[0];
  const size_t drawn = static_cast<size_t>(std::count(xy.begin(), xy.end(), ' ')) + 1;
  EXPECT_LE(drawn, 2u * (640 - 80) + 1);
  EXPECT_GT(drawn, 500u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

// One spike 40x above the rest: the axis ends a little above the 98th percentile, the chart
// says so, and the data attributes keep the true values.
TEST(Svg, OutliersAreClippedAndSaidSo) {
  LineChart c;
  c.id = "loss";
  c.clip_outliers = true;
  Series s{"train loss", "#000", {}, false};
  for (int i = 1; i <= 100; ++i) s.points.emplace_back(i, i == 50 ? 120.0 : 3.0 - i * 0.01);
  c.series.push_back(s);
  const std::string svg = LineChartSvg(c);
  EXPECT_NE(svg.find("axis clipped at"), std::string::npos);
  EXPECT_NE(svg.find("the largest value is 120"), std::string::npos);
  EXPECT_LT(std::stod(Attrs(svg, "svg", "data-y1")[0]), 4.0);
  EXPECT_NE(Attrs(svg, "g", "data-xy")[0].find("50,120"), std::string::npos);
  c.clip_outliers = false;
  EXPECT_EQ(LineChartSvg(c).find("axis clipped"), std::string::npos);
}

TEST(Svg, GoodputBarSplitsTheWallTime) {
  const std::string svg = GoodputBarSvg(Goodput());
  const auto buckets = Attrs(svg, "rect", "data-bucket");
  const auto seconds = Attrs(svg, "rect", "data-seconds");
  ASSERT_EQ(buckets.size(), 7u);
  double total = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    EXPECT_DOUBLE_EQ(std::stod(seconds[i]), Goodput()["time_s"][buckets[i]].get<double>());
    total += std::stod(seconds[i]);
  }
  EXPECT_DOUBLE_EQ(total, 100.0);
  EXPECT_NE(svg.find("60.0% effective training time"), std::string::npos);
}

// Where each interval of the timeline lies: generation 0 is start-up until 5 s, productive until
// step 20 (kept by the resume; at 5 + 45 x 20/30 = 35 s), lost until the crash at 51 s, detection
// until 52 s; generation 1 restarts from the detection until it is ready at 60 s, then trains.
TEST(Svg, TimelinePlacesGenerationsAndFailures) {
  const std::string svg = GoodputTimelineSvg(Goodput(), {1700000000.0 + 40, 1700000000.0 + 90});
  const auto buckets = Attrs(svg, "rect", "data-bucket");
  const auto from = Attrs(svg, "rect", "data-from");
  const auto to = Attrs(svg, "rect", "data-to");
  // The bar chart's rects have no data-from: the timeline's spans are the first ones with it.
  std::vector<std::tuple<std::string, double, double>> spans;
  for (size_t i = 0; i < from.size(); ++i) {
    spans.emplace_back(buckets[buckets.size() - from.size() + i], std::stod(from[i]),
                       std::stod(to[i]));
  }
  const std::vector<std::tuple<std::string, double, double>> want = {
      {"idle", 0, 5},      {"productive", 5, 35},  {"lost", 35, 51}, {"detection", 51, 52},
      {"restart", 52, 60}, {"productive", 60, 95}, {"idle", 95, 100}};
  ASSERT_EQ(spans.size(), want.size()) << svg;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::get<0>(spans[i]), std::get<0>(want[i])) << i;
    EXPECT_NEAR(std::get<1>(spans[i]), std::get<1>(want[i]), 1e-3) << i;
    EXPECT_NEAR(std::get<2>(spans[i]), std::get<2>(want[i]), 1e-3) << i;
  }
  EXPECT_EQ(Attrs(svg, "g", "data-kind"), std::vector<std::string>{"crash"});
  EXPECT_EQ(Attrs(svg, "g", "data-rank"), std::vector<std::string>{"1"});
  EXPECT_EQ(Attrs(svg, "g", "data-host"), std::vector<std::string>{"node7"});
  EXPECT_EQ(Attrs(svg, "line", "data-t").size(), 2u);  // the two checkpoint ticks
}

TEST(HtmlReport, WritesOneSelfContainedPageAndTheCharts) {
  TempDir dir;
  MakeRun(dir);
  auto r = WriteReport(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->html_path, dir / "report.html");
  EXPECT_EQ(r->svg_paths.size(), 8u);  // 6 step charts, the goodput bar, the timeline
  for (const auto& p : r->svg_paths) {
    auto svg = LocalFs().ReadFile(p);
    ASSERT_TRUE(svg.ok());
    EXPECT_EQ(svg->rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << p;
  }
  const std::string html = *LocalFs().ReadFile(r->html_path);
  // Nothing is fetched: no src= or href= anywhere, no @import, no url(.
  for (const char* ref : {" src=", " href=", "@import", "url("}) {
    EXPECT_EQ(html.find(ref), std::string::npos) << ref;
  }
  EXPECT_NE(html.find("data-chart=\"loss\""), std::string::npos);
  EXPECT_NE(html.find("data-chart=\"timeline\""), std::string::npos);
  EXPECT_NE(html.find("rank 1 was killed by signal 9"), std::string::npos);
  EXPECT_NE(html.find("<table id=\"stragglers\">"), std::string::npos);
  EXPECT_NE(html.find("<table id=\"spikes\">"), std::string::npos);
  EXPECT_NE(html.find("1.50 GiB"), std::string::npos);  // 3 x 2^29 bytes
  // A run without goodput.json (plain tenax train) still gets its report.
  std::filesystem::remove(dir / "goodput.json");
  ASSERT_TRUE(WriteReport(dir.path(), "", dir / "other/r.html").ok());
  EXPECT_TRUE(LocalFs().Exists(dir / "other/report/loss.svg"));
}

std::string Get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    (void)!::send(fd, req.data(), req.size(), 0);
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  }
  ::close(fd);
  return out;
}

nlohmann::json Status(double step) {
  nlohmann::json s = {{"source", "tenax launch"},
                      {"ranks_alive", 2},
                      {"ranks", nlohmann::json::array({{{"rank", 0}}, {{"rank", 1}}})},
                      {"step", step},
                      {"generation", 1},
                      {"restarts", 1},
                      {"failures", 1},
                      {"stragglers", 0},
                      {"spares_ready", 1},
                      {"quarantined_slots", nlohmann::json::array()},
                      {"goodput", Goodput()},
                      {"now_unix", 1700000200.0},
                      {"tokens_total", step * 512}};
  s["training"] = {{"step", step},
                   {"loss", 2.5},
                   {"lr", 1e-3},
                   {"grad_norm", 0.7},
                   {"tokens", 512 * step},
                   {"tokens_per_s", 1000.0},
                   {"flops_per_s", 2e9},
                   {"mem_peak_bytes", 1 << 20},
                   {"val_loss", std::nan("")},  // JSON null: not exported
                   {"last_checkpoint_step", 40},
                   {"last_checkpoint_unix", 1700000150.0}};
  return s;
}

TEST(Live, PrometheusTextFollowsTheFormatRules) {
  std::map<std::string, testing::PromFamily> f;
  const std::string text = PrometheusText(Status(60));
  ASSERT_EQ(testing::ParsePrometheus(text, &f), "") << text;
  for (const char* counter :
       {"tenax_restarts_total", "tenax_failures_total", "tenax_failures_by_kind_total",
        "tenax_stragglers_total", "tenax_tokens_total"}) {
    EXPECT_EQ(f[counter].type, "counter") << counter;
  }
  for (const char* gauge :
       {"tenax_step", "tenax_train_loss", "tenax_learning_rate", "tenax_memory_peak_bytes",
        "tenax_goodput_seconds", "tenax_seconds_since_last_checkpoint",
        "tenax_model_flops_per_second"}) {
    EXPECT_EQ(f[gauge].type, "gauge") << gauge;
  }
  EXPECT_EQ(testing::PromValue(f, "tenax_failures_by_kind_total", {{"kind", "crash"}}), 1);
  EXPECT_EQ(testing::PromValue(f, "tenax_goodput_seconds", {{"bucket", "lost"}}), 16);
  EXPECT_EQ(testing::PromValue(f, "tenax_seconds_since_last_checkpoint"), 50);
  EXPECT_EQ(testing::PromValue(f, "tenax_tokens_total"), 60 * 512);
  EXPECT_EQ(f.count("tenax_validation_loss"), 0u);  // null: left out, not NaN
  EXPECT_EQ(f.count("tenax_mfu_ratio"), 0u);        // unknown on CPU
  // The checker itself fails on what it must reject.
  std::map<std::string, testing::PromFamily> bad;
  EXPECT_NE(testing::ParsePrometheus("x 1\n", &bad), "");
  bad.clear();
  EXPECT_NE(testing::ParsePrometheus("# TYPE x_count counter\nx_count 1\n", &bad), "");
  bad.clear();
  EXPECT_NE(testing::ParsePrometheus("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n", &bad), "");
}

// A silent-data-corruption detection (goodput.json `sdc`, <run>/sdc.json): a table in the report
// and one labelled sample in the metrics, with the rank, host, step and digests.
TEST(Live, SilentDataCorruptionIsInTheReportAndTheMetrics) {
  const nlohmann::json sdc = nlohmann::json::parse(R"([{"step": 8, "generation": 0, "rank": 2,
      "host": "node7", "mismatched": [1, 2], "own": "loss 3.2 grads 6dcaffe6/3",
      "replay": "loss 3.2 grads 6f58af98/3", "third": "loss 3.2 grads 6f58af98/3",
      "replayed_by": 3, "third_by": 0, "reasoning": "rank 2's step: the replays agree"}])");
  nlohmann::json s = Status(60);
  s["goodput"]["sdc"] = sdc;
  std::map<std::string, testing::PromFamily> f;
  const std::string text = PrometheusText(s);
  ASSERT_EQ(testing::ParsePrometheus(text, &f), "") << text;
  EXPECT_EQ(testing::PromValue(f, "tenax_silent_corruption_detected",
                               {{"step", "8"},
                                {"rank", "2"},
                                {"host", "node7"},
                                {"own", "loss 3.2 grads 6dcaffe6/3"},
                                {"replay", "loss 3.2 grads 6f58af98/3"},
                                {"third", "loss 3.2 grads 6f58af98/3"}}),
            1)
      << text;
  EXPECT_EQ(PrometheusText(Status(60)).find("tenax_silent_corruption"), std::string::npos);

  TempDir dir;
  MakeRun(dir);
  dir.Write("sdc.json", nlohmann::json{{"detections", sdc}}.dump());
  auto r = WriteReport(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string html = *LocalFs().ReadFile(r->html_path);
  EXPECT_NE(html.find("<table id=\"sdc\">"), std::string::npos);
  EXPECT_NE(html.find("rank 3: loss 3.2 grads 6f58af98/3"), std::string::npos);
  EXPECT_NE(html.find("node7"), std::string::npos);
}

TEST(Live, ServesThePageTheStatusAndTheMetricsOnLoopback) {
  nlohmann::json status = Status(10);
  auto server = HttpServer::Start(
      "127.0.0.1", 0, [&status](const std::string& path) { return ServeLive(path, status); },
      "--metrics-port");
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();
  const std::string page = Get(port, "/");
  EXPECT_NE(page.find("200 OK"), std::string::npos);
  EXPECT_NE(page.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(page.find("\"tokens_total\":5120"), std::string::npos);  // the status, embedded
  EXPECT_EQ(page.find(" src="), std::string::npos);
  const std::string json = Get(port, "/status.json?x=1");
  EXPECT_NE(json.find("\"step\": 10"), std::string::npos) << json;
  const std::string metrics = Get(port, "/metrics");
  EXPECT_NE(metrics.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.find("\ntenax_step 10\n"), std::string::npos) << metrics;
  EXPECT_NE(Get(port, "/nope").find("404 Not Found"), std::string::npos);
  // Only IPv4 addresses; a wrong one names the flag.
  auto bad = HttpServer::Start("example.org", 0, nullptr, "--metrics-port");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--metrics-port address 'example.org'"), std::string::npos);
}

}  // namespace
}  // namespace tenax::report
