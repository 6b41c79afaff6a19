#include "tenax/train/sdc_check.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tenax/core/crc32.h"
#include "tenax/core/fs.h"
#include "tenax/core/run_paths.h"

namespace tenax::train {
namespace {

// The bit an injected fault corrupts in element 0 of `t`: the mantissa's highest, so the value
// changes by at most half and training goes on (a corrupted exponent would mostly overflow, which
// the NaN checks already catch: the silent kind is the interesting one).
int MantissaTopBit(const at::Tensor& t) {
  switch (t.element_size()) {
    case 8:
      return 51;
    case 4:
      return 22;
    default:
      return t.scalar_type() == at::kHalf ? 9 : 6;  // fp16 : bf16
  }
}

// Reads or writes bit `bit` of element 0 in place, through the raw storage: autograd's version
// counters do not see it, as they would not see a device's fault.
bool GetBit(const at::Tensor& t, int bit) {
  uint64_t v = 0;
  std::memcpy(&v, t.data_ptr(), static_cast<size_t>(t.element_size()));
  return ((v >> bit) & 1u) != 0;
}
void SetBit(const at::Tensor& t, int bit, bool value) {
  uint64_t v = 0;
  std::memcpy(&v, t.data_ptr(), static_cast<size_t>(t.element_size()));
  v = value ? (v | (uint64_t{1} << bit)) : (v & ~(uint64_t{1} << bit));
  std::memcpy(t.data_ptr(), &v, static_cast<size_t>(t.element_size()));
}

bool Touchable(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && t.device().is_cpu() && t.is_contiguous();
}

}  // namespace

std::string ComputeDigest::ToString() const {
  std::string s = fmt::format("loss {:.17g} grads {:08x}/{}", loss, grads, buckets);
  if (sq != 0 || proj != 0) s += fmt::format(" norm {:.17g} proj {:.17g}", std::sqrt(sq), proj);
  return s;
}

namespace {
// |a - b| relative to `scale` (0 when both are equal, infinite when only the scale is 0).
double Relative(double a, double b, double scale) {
  const double d = std::fabs(a - b);
  if (d == 0) return 0;
  return scale > 0 ? d / scale : std::numeric_limits<double>::infinity();
}
}  // namespace

double Disagreement(const ComputeDigest& a, const ComputeDigest& b) {
  if (std::isnan(a.loss) || std::isnan(b.loss)) {
    return std::isnan(a.loss) && std::isnan(b.loss) ? 0 : std::numeric_limits<double>::infinity();
  }
  if (a.buckets != b.buckets) return std::numeric_limits<double>::infinity();
  const double na = std::sqrt(a.sq), nb = std::sqrt(b.sq), norm = std::max(na, nb);
  return std::max({Relative(a.loss, b.loss, std::max(std::fabs(a.loss), std::fabs(b.loss))),
                   Relative(na, nb, norm), Relative(a.proj, b.proj, norm)});
}

bool Agree(const ComputeDigest& a, const ComputeDigest& b, double tolerance) {
  if (tolerance <= 0) return a == b;
  return Disagreement(a, b) <= tolerance;
}

void SdcMonitor::BeginPass(int64_t step) {
  site_ = faults_ != nullptr ? faults_->SdcAt(step) : std::nullopt;
  grad_flipped_ = false;
}

void SdcMonitor::Arm() {
  armed_ = true;
  crc_ = 0;
  buckets_ = 0;
  digest_s_ = 0;
  sq_ = 0;
  proj_ = 0;
}

ComputeDigest SdcMonitor::Disarm(double loss) {
  armed_ = false;
  ComputeDigest d{loss, crc_, buckets_};
  d.sq = sq_;
  d.proj = proj_;
  return d;
}

void SdcMonitor::AddStatistics(const at::Tensor& flat) {
  // The signs: one fixed block, the same on every rank and device (a seeded CPU generator),
  // repeated over longer buckets.
  constexpr int64_t kSigns = int64_t{1} << 20;
  if (!signs_.defined() || signs_.device() != flat.device()) {
    at::Generator gen = at::detail::createCPUGenerator(0x5dc);
    signs_ = at::randint(0, 2, {kSigns}, gen, at::TensorOptions().dtype(at::kDouble))
                 .mul_(2)
                 .sub_(1)
                 .to(flat.device());
  }
  const at::Tensor x = flat.reshape({-1}).to(at::kDouble);
  at::Tensor proj = at::zeros({}, x.options());
  for (int64_t i = 0; i < x.numel(); i += kSigns) {
    const int64_t n = std::min(kSigns, x.numel() - i);
    proj.add_(x.narrow(0, i, n).dot(signs_.narrow(0, 0, n)));
  }
  // One copy to the host per bucket (a device sync on a GPU), not one per block of signs.
  const at::Tensor both = at::stack({x.dot(x), proj}).cpu();
  sq_ += both[0].item<double>();
  proj_ += both[1].item<double>();
}

void SdcMonitor::OnBlockWeights(int64_t layer, const std::vector<at::Tensor>& weights,
                                bool gathered) {
  if (site_ != protocol::SdcSite::kWeight || layer != 0 || weights.empty()) return;
  const at::Tensor& w = weights.front();
  if (!Touchable(w)) return;
  // The rank's own parameters (DDP) are flipped once: the memory stays wrong, the optimizer
  // updates the wrong value like any other. A gathered copy (FSDP) is rebuilt from the shards
  // each time: the defective device flips it again on every gather.
  if (!gathered && weight_flipped_) return;
  const int bit = MantissaTopBit(w);
  SetBit(w, bit, !GetBit(w, bit));
  weight_flipped_ = true;
}

void SdcMonitor::OnBlockOutput(int64_t layer, const at::Tensor& output) {
  if (site_ != protocol::SdcSite::kActivation || layer != 0 || !Touchable(output)) return;
  const int bit = MantissaTopBit(output);
  SetBit(output, bit, !GetBit(output, bit));
}

void SdcMonitor::OnLocalGradients(const std::string& /*unit*/, const at::Tensor& flat) {
  if (site_ == protocol::SdcSite::kGrad && !grad_flipped_ && Touchable(flat)) {
    const int bit = MantissaTopBit(flat);
    SetBit(flat, bit, !GetBit(flat, bit));
    grad_flipped_ = true;
  }
  if (!armed_) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (statistics_) AddStatistics(flat);
  const at::Tensor c = flat.is_contiguous() ? flat : flat.contiguous();
  const at::Tensor host = c.device().is_cpu() ? c : c.cpu();
  crc_ = Crc32(host.data_ptr(), static_cast<size_t>(host.nbytes()), crc_);
  ++buckets_;
  digest_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::vector<int>> Rings(int dp, int copies) {
  std::vector<std::vector<int>> rings(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    for (int d = 0; d < dp; ++d) rings[c].push_back(d * copies + c);
  }
  return rings;
}

const std::vector<int>& RingOf(const std::vector<std::vector<int>>& rings, int rank) {
  const auto it = std::find_if(rings.begin(), rings.end(), [&](const std::vector<int>& ring) {
    return std::find(ring.begin(), ring.end(), rank) != ring.end();
  });
  TENAX_CHECK_MSG(it != rings.end(), "RingOf: the rank is in no ring");
  return *it;
}

int RingAfter(const std::vector<int>& ring, int rank, int k) {
  const int n = static_cast<int>(ring.size());
  const int i = static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
  return ring[static_cast<size_t>(((i + k) % n + n) % n)];
}

std::vector<int> Mismatched(const std::vector<int>& ring, const std::vector<ComputeDigest>& own,
                            const std::vector<ComputeDigest>& replay1, double tolerance) {
  std::vector<int> out;
  for (int s : ring) {
    if (!Agree(own[s], replay1[RingAfter(ring, s, 1)], tolerance)) out.push_back(s);
  }
  return out;
}

SdcVerdict Judge(const std::vector<int>& ring, const std::vector<ComputeDigest>& own,
                 const std::vector<ComputeDigest>& replay1,
                 const std::vector<ComputeDigest>& replay2, double tolerance) {
  auto same = [&](const ComputeDigest& a, const ComputeDigest& b) {
    return Agree(a, b, tolerance);
  };
  SdcVerdict v;
  std::vector<std::string> lines;
  auto name = [&](int r) {
    if (std::find(v.faulty.begin(), v.faulty.end(), r) == v.faulty.end()) v.faulty.push_back(r);
  };
  for (int s : Mismatched(ring, own, replay1, tolerance)) {
    const int next = RingAfter(ring, s, 1), third = RingAfter(ring, s, 2);
    const ComputeDigest& t = replay2[third];
    if (same(t, own[s]) && !same(t, replay1[next])) {
      name(next);
      lines.push_back(fmt::format(
          "rank {}'s step: its own result and rank {}'s replay agree, rank {}'s replay differs", s,
          third, next));
    } else if (same(t, replay1[next]) && !same(t, own[s])) {
      name(s);
      lines.push_back(fmt::format(
          "rank {}'s step: the replays of ranks {} and {} agree, its own result differs", s, next,
          third));
    } else {
      lines.push_back(
          fmt::format("rank {}'s step: its own result, rank {}'s and rank {}'s replays all differ",
                      s, next, third));
    }
  }
  std::sort(v.faulty.begin(), v.faulty.end());
  v.reasoning = fmt::format("{}", fmt::join(lines, "; "));
  return v;
}

Result<std::vector<SdcRecord>> ReadSdcRecords(const std::string& run_dir) {
  std::vector<SdcRecord> out;
  const std::string path = RunPaths(run_dir).sdc();
  if (!LocalFs().Exists(path)) return out;
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("detections") ||
      !j["detections"].is_array()) {
    return DataError(path +
                     " is not a silent-data-corruption record ({\"detections\": [...]}); move "
                     "it aside to start the record afresh");
  }
  try {
    for (const auto& d : j["detections"]) {
      SdcRecord r;
      r.step = d.at("step").get<int64_t>();
      r.generation = d.value("generation", 0);
      r.rank = d.at("rank").get<int>();
      r.host = d.value("host", "");
      r.mismatched = d.value("mismatched", std::vector<int>{});
      r.own = d.value("own", "");
      r.replay = d.value("replay", "");
      r.third = d.value("third", "");
      r.replayed_by = d.value("replayed_by", -1);
      r.third_by = d.value("third_by", -1);
      r.reasoning = d.value("reasoning", "");
      out.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    return DataError(path + ": " + e.what() + "; move it aside to start the record afresh");
  }
  return out;
}

Status AppendSdcRecord(const std::string& run_dir, const SdcRecord& record) {
  TENAX_ASSIGN_OR_RETURN(std::vector<SdcRecord> all, ReadSdcRecords(run_dir));
  all.push_back(record);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : all) {
    list.push_back({{"step", r.step},
                    {"generation", r.generation},
                    {"rank", r.rank},
                    {"host", r.host},
                    {"mismatched", r.mismatched},
                    {"own", r.own},
                    {"replay", r.replay},
                    {"third", r.third},
                    {"replayed_by", r.replayed_by},
                    {"third_by", r.third_by},
                    {"reasoning", r.reasoning}});
  }
  return LocalFs().WriteFileAtomic(RunPaths(run_dir).sdc(),
                                   nlohmann::json{{"detections", list}}.dump(2) + "\n");
}

}  // namespace tenax::train
