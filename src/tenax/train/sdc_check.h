// Silent data corruption found by deterministic replay (resilience.sdc_check_interval = N;
// docs/resilience.md). A CPU rank's step is a pure function of its weights and its samples, bit
// for bit, so a second rank that recomputes it from the same weights must get the same bits; a
// device that miscomputes shows up as a difference.
//
// The check, on a check step (every N steps, the run's first step so that its cost is measured
// at once, and every checkpoint step so that no checkpoint is committed unverified):
//   1. every data-parallel rank r replays the step of rank r - 1 (mod n): same weights, same
//      micro-batches, the gradients digested before any reduction and dropped (Fsdp's replay);
//   2. it runs its own step, digesting its gradients the same way before they are reduced;
//   3. the digests (loss, CRC-32 of every gradient bucket in reduction order) are all-gathered:
//      rank s's own digest must equal rank s + 1's replay of it;
//   4. on a mismatch every rank replays the step of rank r - 2, a third opinion on each pair:
//      the rank that disagrees with the two others is faulty (Judge).
// The faulty rank ends with kind silent-corruption, the others as its peers; the launcher
// quarantines its slot at once and restarts from the newest checkpoint, which a check verified.
// Tensor and pipeline parallelism: a whole TP/PP group replays the same data-parallel slot
// together, and each position in the group has its own ring over the data-parallel index
// (Rings). A corruption that reaches a TP collective or the next pipeline stage spreads to the
// ranks it reaches, and the check names every one of them (all are quarantined); one confined
// to a rank's own gradients names that rank alone.
// Cost: one replay (a step's forward and backward, no gradient reduction) per check.
// Where bitwise equality cannot hold (GPU kernels that are not deterministic, another device
// kind), resilience.sdc_tolerance = t > 0 compares statistics instead (Agree): the loss within t
// of itself, the gradients' L2 norm within t of itself, and their projection on a fixed random
// sign vector (fp64) within t of the norm. Noise of relative size e in every element moves the
// projection by about e times the norm; a corruption is seen when it moves the gradients by more
// than about t of their norm, and a smaller one goes unseen (the price of a tolerance).
// Expert parallelism: a group's all-to-all mixes its ranks' samples, so the whole expert-parallel
// group replays the group before it, and each place in the group has its own ring over the
// groups (3 groups needed, not 3 data-parallel ranks).
// Live recovery: a ring for each place in a replica over the live epoch's replicas (DDP: the
// members), each replaying the parts of the batch the rank at its place in the replica before
// runs in that epoch (Trainer::SdcReplay); a detection restarts the job from the verified
// checkpoint as in restart mode (the launcher does not recover it live). A replica holds whole
// expert-parallel groups, so live the rings are the same with experts.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/parallel/fsdp.h"
#include "tenax/protocol/fault_injection.h"

namespace tenax::train {

// What one forward/backward pass computed, reduced to a comparison.
struct ComputeDigest {
  double loss = 0;      // the pass's mean loss
  uint32_t grads = 0;   // CRC-32 over every gradient bucket's bytes, in reduction order
  int64_t buckets = 0;  // how many buckets it covered
  // With a tolerance (SdcMonitor's statistics on): the gradients' sum of squares and their
  // projection on the fixed random signs, both in fp64 over every bucket; 0 otherwise.
  double sq = 0;
  double proj = 0;
  bool operator==(const ComputeDigest& o) const {
    // Bit patterns: a NaN loss equals itself, 0.0 and -0.0 differ, as the devices computed them.
    return std::memcmp(&loss, &o.loss, sizeof loss) == 0 && grads == o.grads &&
           buckets == o.buckets;
  }
  bool operator!=(const ComputeDigest& o) const { return !(*this == o); }
  // "loss 3.2101 grads 1a2b3c4d/9", and " norm 1.5 proj -0.02" when the statistics are on.
  std::string ToString() const;
};

// Whether two digests of the same pass agree: bit for bit when `tolerance` is 0, else within it
// (the file comment; a NaN loss agrees only with a NaN).
bool Agree(const ComputeDigest& a, const ComputeDigest& b, double tolerance);
// How far apart two digests' statistics are, as the largest of the three relative differences
// Agree compares with the tolerance (0 for identical digests): what a run prints so that its
// tolerance can be chosen from what agreeing devices really differ by.
double Disagreement(const ComputeDigest& a, const ComputeDigest& b);

// Digests this rank's passes while armed, and plays an injected `sdc` fault (a defective device:
// it corrupts every pass from the fault's step on, its replays of other ranks included).
// Thread safety: the training thread only.
class SdcMonitor final : public parallel::ComputeObserver {
 public:
  // `statistics`: also the fp64 sum of squares and random projection (a tolerance is set).
  explicit SdcMonitor(protocol::FaultInjector* faults, bool statistics = false)
      : faults_(faults), statistics_(statistics) {}

  // A pass of `step` begins (the own step or a replay): the injected fault's state for it.
  void BeginPass(int64_t step);
  void Arm();                                    // start digesting
  ComputeDigest Disarm(double loss);             // the digest since Arm
  double digest_s() const { return digest_s_; }  // spent digesting since Arm (wall seconds)

  void OnBlockWeights(int64_t layer, const std::vector<at::Tensor>& weights,
                      bool gathered) override;
  void OnBlockOutput(int64_t layer, const at::Tensor& output) override;
  void OnLocalGradients(const std::string& unit, const at::Tensor& flat) override;

 private:
  void AddStatistics(const at::Tensor& flat);

  protocol::FaultInjector* const faults_;  // null: no faults
  const bool statistics_;
  at::Tensor signs_;  // the fixed random +-1 of the projection (fp64, on the buckets' device)
  double sq_ = 0, proj_ = 0;
  std::optional<protocol::SdcSite> site_;  // the fault acting on this pass
  bool grad_flipped_ = false;              // this pass's first bucket was corrupted
  bool weight_flipped_ = false;            // weight: the rank's own parameters were corrupted
  bool armed_ = false;
  uint32_t crc_ = 0;
  int64_t buckets_ = 0;
  double digest_s_ = 0;
};

// A ring: the ranks that replay each other's steps, in order (ring[i + 1] replays ring[i]'s step,
// ring[i + 2] gives the third opinion). Under tensor or pipeline parallelism each position in the
// TP/PP group has its own ring over the data-parallel index (Rings); under expert parallelism
// each position in the expert-parallel group and the TP/PP group, over the groups (Rings(dp /
// ep, ep * copies)). Digests are indexed by rank.
std::vector<std::vector<int>> Rings(int dp, int copies);  // rank = dp_index * copies + c
// The ring of `rings` that holds `rank`; the rank `k` places after `rank` in `ring` (k < 0:
// before).
const std::vector<int>& RingOf(const std::vector<std::vector<int>>& rings, int rank);
int RingAfter(const std::vector<int>& ring, int rank, int k);

// The ranks of `ring` whose own digest disagrees with the next one's replay of it (Agree).
std::vector<int> Mismatched(const std::vector<int>& ring, const std::vector<ComputeDigest>& own,
                            const std::vector<ComputeDigest>& replay1, double tolerance = 0);

struct SdcVerdict {
  std::vector<int> faulty;  // the ranks named (empty: no pair could be decided)
  std::string reasoning;    // one line per disagreeing pair
};
// The third opinion: replay2 of the rank two places on is its replay of s's step. For each
// disagreeing pair (s, next): the third agrees with s's own digest -> next replayed wrongly; with
// next's replay -> s computed wrongly; with neither -> undecided. Needs rings of 3 or more.
SdcVerdict Judge(const std::vector<int>& ring, const std::vector<ComputeDigest>& own,
                 const std::vector<ComputeDigest>& replay1,
                 const std::vector<ComputeDigest>& replay2, double tolerance = 0);

// One detection, as <run_dir>/sdc.json keeps it (goodput.json `sdc`, the report, Prometheus).
struct SdcRecord {
  int64_t step = 0;
  int generation = 0;
  int rank = -1;  // the faulty rank; -1: undecided
  std::string host;
  std::vector<int> mismatched;     // ranks s whose own digest disagreed with its replay
  std::string own, replay, third;  // rank's own digest, rank + 1's replay, rank + 2's replay
  int replayed_by = -1, third_by = -1;
  std::string reasoning;
};
Result<std::vector<SdcRecord>> ReadSdcRecords(const std::string& run_dir);  // absent: none
// Rewrites <run_dir>/sdc.json atomically with `record` appended.
Status AppendSdcRecord(const std::string& run_dir, const SdcRecord& record);

}  // namespace tenax::train
