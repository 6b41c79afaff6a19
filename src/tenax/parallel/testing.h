// Multi-rank tests without a launcher: a test re-runs its own binary N times as ranks
// (RANK/WORLD_SIZE/MASTER_PORT set, --gtest_filter picking a DISABLED_ worker test) and checks
// that every rank exits 0. Workers assert with gtest as usual.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/core/net.h"

namespace tenax::parallel::testing {

// A Llama small enough for several CPU ranks (GQA: 4 query heads, 2 kv heads; TP 2 splits it),
// sequences up to 8 tokens; init_std 0.2 keeps gradients far from zero so comparisons mean
// something.
inline ModelSpec SmallLlamaSpec(int64_t layers, bool tied) {
  ModelSpec s;
  s.name = "parallel-test";
  s.dim = 32;
  s.n_layers = layers;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_hidden_dim = 48;
  s.vocab_size = 40;
  s.max_seq_len = 8;
  s.init_std = 0.2;
  s.tie_embeddings = tied;
  return s;
}

// Runs `world` copies of this test binary running `worker_filter`; returns their exit codes.
inline std::vector<int> RunRanks(int world, const std::string& worker_filter,
                                 const std::vector<std::string>& extra_env = {}) {
  const int port = FreeTcpPort();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      for (const auto& kv : extra_env) ::putenv(const_cast<char*>(kv.c_str()));
      const std::string filter = "--gtest_filter=" + worker_filter;
      ::execl("/proc/self/exe", "worker", filter.c_str(), "--gtest_also_run_disabled_tests",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace tenax::parallel::testing
