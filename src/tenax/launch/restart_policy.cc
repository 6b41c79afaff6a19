#include "tenax/launch/restart_policy.h"

#include <fmt/format.h>

#include <climits>

namespace tenax::launch {
namespace {

std::string Window(const PerWindow& w) {
  return w.window_s == 3600 ? "1h" : w.window_s == 60 ? "1min" : "1s";
}

}  // namespace

Result<RestartPolicy> RestartPolicy::FromOptions(const LaunchOptions& o) {
  const bool etcd = o.rdzv.rfind("etcd://", 0) == 0;
  const bool fixed_nodes = o.nnodes > 1 && !etcd;
  std::optional<PerWindow> budget;
  if (o.restart_budget_given || !o.max_restarts_given) {
    budget = ParsePerWindow(o.restart_budget);
    if (!budget) {
      return InvalidArgument(fmt::format(
          "--restart-budget {}: expected N/h, N/min or N/s (restarts allowed within that "
          "trailing window), e.g. 10/h",
          o.restart_budget));
    }
  }
  if (fixed_nodes) {
    if (o.restart_budget_given) {
      return InvalidArgument(
          "--restart-budget with --nnodes > 1 needs --rdzv etcd://HOST:PORT (node agents that "
          "meet in etcd); a fixed --rdzv HOST:PORT cannot restart across nodes");
    }
    budget.reset();
    if (!o.max_restarts_given) {
      RestartPolicy none(0, std::nullopt);
      none.none_ =
          "no restarts: nodes that meet at a fixed --rdzv HOST:PORT cannot restart the job (node "
          "agents that meet in etcd can: --rdzv etcd://HOST:PORT)";
      return none;
    }
  }
  return RestartPolicy(o.max_restarts_given ? std::optional<int>(o.max_restarts) : std::nullopt,
                       budget);
}

int RestartPolicy::Recent(double now) const {
  int n = 0;
  for (const auto& [generation, at] : taken_) n += now - at < budget_->window_s;
  return n;
}

std::optional<std::string> RestartPolicy::Take(int64_t generation, double now) {
  if (taken_.count(generation) > 0) return std::nullopt;  // already counted (several reports)
  if (!none_.empty()) return none_;
  if (max_ && generation + 1 > *max_) {
    return fmt::format("no restarts left ({} used, --max-restarts)", *max_);
  }
  if (budget_ && Recent(now) + 1 > budget_->count) {
    return fmt::format(
        "restart budget spent: {} restart(s) in the last {} (--restart-budget {:g}/{}); failures "
        "this frequent need a person: see the failures above and docs/exit_codes.md, then start "
        "the same command again (it resumes), with a larger --restart-budget if they were "
        "transient",
        Recent(now), Window(*budget_), budget_->count,
        budget_->window_s == 3600 ? "h"
        : budget_->window_s == 60 ? "min"
                                  : "s");
  }
  taken_[generation] = now;
  return std::nullopt;
}

std::string RestartPolicy::Describe(int64_t generation, double now) const {
  std::string out = fmt::format("restart {}", generation + 1);
  if (max_) out += fmt::format(" of {}", *max_);
  if (budget_) {
    out += fmt::format(" ({} in the last {}; --restart-budget allows {:g})", Recent(now),
                       Window(*budget_), budget_->count);
  }
  return out;
}

int RestartPolicy::max_generation() const { return max_ ? *max_ : INT_MAX / 2; }

}  // namespace tenax::launch
