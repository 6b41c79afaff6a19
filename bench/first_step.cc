// Seconds from starting `tenax train` to its first finished step (process start, data, model
// init, first forward/backward/update), median of N runs. Usage:
//   build/bench/bench_first_step [runs=3] [preset=debug-small] [source=brown]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::string preset = argc > 2 ? argv[2] : "debug-small";
  const std::string source = argc > 3 ? argv[3] : "brown";
  const char* bin = std::getenv("TENAX_BINARY");
  const std::string tenax = bin ? bin : TENAX_BINARY_DEFAULT;
  std::vector<double> times;
  for (int r = 0; r < runs; ++r) {
    const std::string dir = "/tmp/tenax-bench-first-step-" + std::to_string(r);
    const std::string cmd = "rm -rf " + dir + " && '" + tenax +
                            "' train --defaults --set model.preset=" + preset +
                            " --set data.source=" + source +
                            " --set training.steps=1 --set metrics.progress=never "
                            "--set checkpoint.enable=false --set metrics.eval_interval=0 "
                            "--set metrics.eval_tokens=256 --set job.dump_folder=" +
                            dir + " 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return 1;
    char line[4096];
    double t_first = -1;
    while (std::fgets(line, sizeof(line), p)) {
      if (t_first < 0 && std::string(line).rfind("step 1/", 0) == 0) {
        t_first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    const int rc = ::pclose(p);
    if (rc != 0 || t_first < 0) {
      fmt::print(stderr, "run {} failed (exit {}): {}\n", r, rc, cmd);
      return 1;
    }
    times.push_back(t_first);
  }
  std::sort(times.begin(), times.end());
  fmt::print(
      "| preset | source | runs | median s to first step | min | max "
      "|\n|---|---|---|---|---|---|\n");
  fmt::print("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} |\n", preset, source, runs,
             times[times.size() / 2], times.front(), times.back());
  return 0;
}
