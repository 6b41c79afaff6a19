#include "tenax/launch/stragglers.h"

#include <algorithm>

namespace tenax::launch {
namespace {

constexpr int64_t kWindow = 64;  // steps a slow poll may lag before incomplete steps are dropped

}  // namespace

StragglerDetector::StragglerDetector(int ranks, double factor, int steps)
    : ranks_(ranks), factor_(factor), steps_(steps) {
  Reset();
}

void StragglerDetector::Reset() {
  by_step_.clear();
  done_ = 0;
  run_.assign(ranks_, 0);
  reported_.assign(ranks_, false);
}

void StragglerDetector::Add(int local, const std::vector<std::pair<int64_t, double>>& recent) {
  for (const auto& [step, compute] : recent) {
    if (step <= done_) continue;
    auto& v = by_step_[step];
    if (v.empty()) v.assign(ranks_, -1.0);
    v[local] = compute;
  }
}

std::vector<Straggler> StragglerDetector::Evaluate() {
  std::vector<Straggler> out;
  const int64_t newest = by_step_.empty() ? 0 : by_step_.rbegin()->first;
  while (!by_step_.empty()) {
    auto it = by_step_.begin();
    const std::vector<double>& v = it->second;
    const bool complete = std::none_of(v.begin(), v.end(), [](double c) { return c < 0; });
    if (!complete && it->first > newest - kWindow) break;  // wait for the other ranks' beats
    if (complete && ranks_ > 1) {
      for (int r = 0; r < ranks_; ++r) {
        std::vector<double> others;
        for (int o = 0; o < ranks_; ++o) {
          if (o != r) others.push_back(v[o]);
        }
        std::sort(others.begin(), others.end());
        const size_t n = others.size();
        const double median = n % 2 ? others[n / 2] : 0.5 * (others[n / 2 - 1] + others[n / 2]);
        run_[r] = (median > 0 && v[r] > factor_ * median) ? run_[r] + 1 : 0;
        if (run_[r] >= steps_ && !reported_[r]) {
          reported_[r] = true;
          out.push_back({r, it->first, v[r], median});
        }
      }
    }
    done_ = it->first;
    by_step_.erase(it);
  }
  return out;
}

}  // namespace tenax::launch
