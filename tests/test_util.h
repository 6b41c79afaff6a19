// Helpers for cross-cutting tests: temp folders, running the tenax binary as a user would, and
// reading the files a run leaves behind. Paths come from ctest's environment
// (tests/CMakeLists.txt).
#pragma once

#include <sys/types.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/core/temp_dir.h"  // TempDir

namespace tenax::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// --exit-timeout for tests whose injected exit-hang must be killed while every healthy rank
// leaves on its own: long enough for a libtorch process's teardown on a loaded 2-core machine
// (1 s was not), short enough not to dominate the test.
constexpr int kTeardownTimeoutS = 10;

std::string SourceDir();    // $TENAX_SOURCE_DIR
std::string TenaxBinary();  // $TENAX_BINARY
std::string Python();       // $TENAX_PYTHON (Debian's python3 with python3-torch)

// Runs `command` through /bin/sh in `cwd`, capturing output.
CommandResult Run(const std::string& command, const std::string& cwd = ".");
// Same as Run; usable inside TEST bodies, where gtest's Test::Run hides the short name.
inline CommandResult RunCommand(const std::string& command, const std::string& cwd = ".") {
  return Run(command, cwd);
}
// Runs the tenax binary with `args` (already shell-quoted where needed) in `cwd`.
CommandResult RunTenax(const std::string& args, const std::string& cwd);
// Same, keeping stdout only (the log, on stderr, is discarded): for commands whose stdout is data.
CommandResult RunTenaxStdout(const std::string& args, const std::string& cwd);

// A tenax process started in the background (not through a shell, so pid() is tenax's own),
// its output going to `log`. The destructor kills it (SIGKILL) if it is still running.
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::string& cwd, std::string log);
  // Any program: `argv[0]` is looked up in PATH (e.g. {"ip", "netns", "exec", ...}); exec
  // chains keep the pid, so pid() ends up as the last program's.
  struct Program {};
  Background(Program, const std::vector<std::string>& argv, const std::string& cwd,
             std::string log);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  // Waits up to `timeout_s` for the process to end; its exit code (128 + signal), or -1 on
  // timeout.
  int Wait(double timeout_s);
  std::string output() const;

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_;
};

// Polls `condition` every 20 ms until it holds (true) or `timeout_s` passes (false). For waiting
// on an event that leaves a trace in a file or /proc; the timeout only bounds a broken run.
bool WaitFor(const std::function<bool()>& condition, double timeout_s);
// Every descendant of `pid` (children, grandchildren, ...), from /proc.
std::vector<pid_t> Descendants(pid_t pid);
// Whether `pid` is a running process (not gone, not a zombie).
bool Alive(pid_t pid);
// Splits a command line on spaces (no quoting): test arguments never contain spaces.
std::vector<std::string> Words(const std::string& line);

// The resilience tests' run (resilience_e2e_test, live_recovery_e2e_test): debug-tiny on a
// synthetic order-1 Markov source, seq 32, local batch 4, 12 steps with a checkpoint every 3;
// the `train ...` arguments with job.dump_folder `dump`, job.name `name`, then `extra`.
std::string ResilienceTrain(const std::string& dump, const std::string& name,
                            const std::string& extra = "");

// The multi-node tests' run (multinode_e2e_test, slurm_e2e_test): debug-tiny on a synthetic
// order-1 Markov source, 4 ranks' local batch 2, a checkpoint every 4 steps, `steps` steps; the
// `train ...` arguments with job.dump_folder `dump` and job.name `name`.
std::string MultiNodeTrain(const std::string& dump, const std::string& name, int steps);
// Rank `shard`'s model file of such a run's checkpoint at `step`, in `dump`/`run` (empty if
// missing): the final weights two runs must agree on bit for bit.
std::string MultiNodeShard(const std::string& dump, const std::string& run, int step, int shard);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);
std::vector<nlohmann::json> ReadJsonl(const std::string& path);
// The values of `key` in a metrics.jsonl, in order, from the records that carry it ("loss": one
// per logged step; "val_loss": one per evaluation).
std::vector<double> ReadMetric(const std::string& metrics_jsonl, const std::string& key);
// The whole HTTP/1.0 answer (status line, headers, body) of GET `path` on 127.0.0.1:`port`;
// empty when nothing listens there.
std::string HttpGet(int port, const std::string& path);

}  // namespace tenax::testing
