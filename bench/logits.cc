// The logits tenax computes for a checkpoint: scripts/gpu-check (bench/hf_logits.py) compares
// them with transformers' on the exported Hugging Face folder. Reads whitespace-separated token
// ids, one sequence per line (equal lengths), runs the model in fp32 on the device, and writes
// the (B, T, V) logits as "logits" in a safetensors file.
//   build/bench/bench_logits CHECKPOINT TOKENS.txt OUT.safetensors [cpu|cuda]
// CHECKPOINT: a step folder or a checkpoint folder (its newest committed step).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/model/llama.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/tensor_io.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} CHECKPOINT TOKENS.txt OUT.safetensors [cpu|cuda]\n", argv[0]);
    return 2;
  }
  const at::Device device =
      argc > 4 && std::string(argv[4]) == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  auto ckpt = tenax::model::LoadModelCheckpoint(argv[1]);
  if (!ckpt.ok()) {
    fmt::print(stderr, "{}\n", ckpt.status().ToString());
    return 1;
  }
  std::vector<std::vector<int64_t>> rows;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<int64_t> row;
    for (int64_t id; words >> id;) row.push_back(id);
    if (!row.empty()) rows.push_back(row);
  }
  if (rows.empty() || rows.front().empty()) {
    fmt::print(stderr, "{}: no token ids\n", argv[2]);
    return 2;
  }
  const int64_t b = static_cast<int64_t>(rows.size()), t = static_cast<int64_t>(rows[0].size());
  at::Tensor tokens = at::empty({b, t}, at::kLong);
  for (int64_t i = 0; i < b; ++i) {
    if (static_cast<int64_t>(rows[static_cast<size_t>(i)].size()) != t) {
      fmt::print(stderr, "{}: every line needs {} ids\n", argv[2], t);
      return 2;
    }
    for (int64_t j = 0; j < t; ++j)
      tokens[i][j] = rows[static_cast<size_t>(i)][static_cast<size_t>(j)];
  }
  // TF32 off: the comparison is about the model, not the GPU's reduced-precision products.
  at::globalContext().setAllowTF32CuBLAS(false);
  tenax::model::Llama model(ckpt->spec, 0, device);
  if (auto st = model.LoadParams(ckpt->params); !st.ok()) {
    fmt::print(stderr, "{}\n", st.ToString());
    return 1;
  }
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.Logits(tokens.to(device), at::kFloat).to(at::kCPU);  // (B, T, V)
  const std::string bytes =
      tenax::model::SerializeTensors({{"logits", logits}}, {{"format", "tenax-logits"}});
  if (auto st = tenax::LocalFs().WriteFileAtomic(argv[3], bytes); !st.ok()) {
    fmt::print(stderr, "{}\n", st.ToString());
    return 1;
  }
  fmt::print("logits ({}, {}, {}) on {} -> {}\n", b, t, logits.size(2), device.str(), argv[3]);
  return 0;
}
