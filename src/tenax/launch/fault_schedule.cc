#include "tenax/launch/fault_schedule.h"

#include <algorithm>
#include <cmath>

namespace tenax::launch {

const char* ScheduledKindName(ScheduledKind k) {
  switch (k) {
    case ScheduledKind::kCrash:
      return "crash";
    case ScheduledKind::kHang:
      return "hang";
    case ScheduledKind::kNan:
      return "nan";
  }
  return "?";
}

FaultSchedule::FaultSchedule(const protocol::Fault& poisson, int ranks)
    : spec_(poisson), ranks_(std::max(1, ranks)), rng_(DeriveSeed(poisson.seed, 0)) {
  next_.index = -1;
  Draw();
}

void FaultSchedule::Draw() {
  const protocol::Fault::Rates& r = spec_.rates;
  const double gap = rng_.Exponential(r.total());
  // The kind in proportion to its rate, then the rank: two draws per arrival, always, so the
  // sequence depends on the seed alone.
  const double u = rng_.Uniform() * r.total();
  next_.kind = u < r.crash            ? ScheduledKind::kCrash
               : u < r.crash + r.hang ? ScheduledKind::kHang
                                      : ScheduledKind::kNan;
  if (next_.kind == ScheduledKind::kNan && !(r.nan > 0)) next_.kind = ScheduledKind::kHang;
  if (next_.kind == ScheduledKind::kHang && !(r.hang > 0)) next_.kind = ScheduledKind::kCrash;
  next_.local_rank = static_cast<int>(rng_.Below(static_cast<uint64_t>(ranks_)));
  next_.exposure_s = (next_.index < 0 ? 0.0 : next_.exposure_s) + gap;
  ++next_.index;
}

void FaultSchedule::Tick(double now, bool exposed) {
  if (exposed_ && awaiting_ < 0 && now > last_tick_) exposure_ += now - last_tick_;
  last_tick_ = std::max(last_tick_, now);
  exposed_ = exposed;
}

std::optional<Arrival> FaultSchedule::Due() const {
  if (awaiting_ >= 0 || next_.exposure_s > exposure_) return std::nullopt;
  return next_;
}

double FaultSchedule::SecondsUntilDue(double now) const {
  if (!exposed_ || awaiting_ >= 0) return INFINITY;
  return std::max(0.0, next_.exposure_s - exposure_ - std::max(0.0, now - last_tick_));
}

void FaultSchedule::Applied(double now, int generation, int rank, int64_t step,
                            const std::string& how) {
  Tick(now, exposed_);
  applied_.push_back({{"index", next_.index},
                      {"kind", ScheduledKindName(next_.kind)},
                      {"rank", rank},
                      {"generation", generation},
                      {"step", step},
                      {"exposure_s", next_.exposure_s},
                      {"applied_exposure_s", exposure_},
                      {"time_s", now},
                      {"how", how}});
  awaiting_ = next_.index;
  Draw();
}

void FaultSchedule::Skipped(double now, int rank, const std::string& why) {
  Tick(now, exposed_);
  skipped_.push_back({{"index", next_.index},
                      {"kind", ScheduledKindName(next_.kind)},
                      {"rank", rank},
                      {"exposure_s", next_.exposure_s},
                      {"time_s", now},
                      {"why", why}});
  Draw();
}

void FaultSchedule::Resolved(double now) {
  if (awaiting_ < 0) return;
  awaiting_ = -1;
  last_tick_ = std::max(last_tick_, now);
  exposed_ = true;  // the restart that follows a verdict is exposed
}

nlohmann::json FaultSchedule::Report() const {
  const protocol::Fault::Rates& r = spec_.rates;
  return {{"spec", spec_.text},
          {"rates_per_hour",
           {{"crash", r.crash * 3600}, {"hang", r.hang * 3600}, {"nan", r.nan * 3600}}},
          {"seed", spec_.seed},
          {"ranks", ranks_},
          {"exposure_s", exposure_},
          {"injected", applied_},
          {"skipped", skipped_}};
}

}  // namespace tenax::launch
