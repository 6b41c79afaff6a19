// The --inject grammar: every kind parses with its fields and defaults, gen=all, and malformed
// specs are refused with a message that names the item and the grammar.
#include "tenax/protocol/fault_injection.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tenax/core/fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::protocol {
namespace {

using testing::TempDir;

TEST(FaultInjectionTest, ParsesEveryKind) {
  Result<std::vector<Fault>> f = ParseFaults(
      "crash:rank=1:step=8:how=exit:code=3,hang:rank=0:step=5:gen=2,slow:rank=1:factor=2.5,"
      "nan:rank=0:step=4,ckpt-fail:step=9,ckpt-corrupt:step=6,kill-in-ckpt:rank=1:step=3,"
      "spike:rank=1:step=10:gen=all,spike:rank=0:step=11:factor=7,push-loss:rank=3:gen=all,"
      "stop:rank=1:step=6:gen=1,exit-hang:rank=2,exit-crash:rank=0:code=3,"
      "sdc:rank=2:step=5,sdc:rank=1:step=3:where=activation,sdc:rank=0:step=4:where=weight");
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->size(), 16u);
  const std::vector<Fault>& v = *f;
  EXPECT_EQ(v[0].kind, FaultKind::kCrash);
  EXPECT_EQ(v[0].rank, 1);
  EXPECT_EQ(v[0].step, 8);
  EXPECT_FALSE(v[0].kill);
  EXPECT_EQ(v[0].text, "crash:rank=1:step=8:how=exit:code=3");
  EXPECT_EQ(v[8].index, 8);
  EXPECT_EQ(v[0].code, 3);
  EXPECT_EQ(v[0].generation, 0);
  EXPECT_EQ(v[1].kind, FaultKind::kHang);
  EXPECT_EQ(v[1].generation, 2);
  EXPECT_EQ(v[2].kind, FaultKind::kSlow);
  EXPECT_DOUBLE_EQ(v[2].factor, 2.5);
  EXPECT_EQ(v[2].step, 1);  // from step 1 by default
  EXPECT_EQ(v[4].kind, FaultKind::kCkptFail);
  EXPECT_EQ(v[5].kind, FaultKind::kCkptCorrupt);
  EXPECT_EQ(v[6].kind, FaultKind::kKillInCkpt);
  EXPECT_EQ(v[7].kind, FaultKind::kSpike);
  EXPECT_EQ(v[7].step, 10);
  EXPECT_DOUBLE_EQ(v[7].factor, 100);  // the default
  EXPECT_EQ(v[7].generation, Fault::kEveryGeneration);
  EXPECT_DOUBLE_EQ(v[8].factor, 7);
  EXPECT_EQ(v[9].kind, FaultKind::kPushLoss);
  EXPECT_EQ(v[9].rank, 3);
  EXPECT_EQ(v[9].generation, Fault::kEveryGeneration);
  EXPECT_EQ(v[10].kind, FaultKind::kStop);
  EXPECT_EQ(v[10].rank, 1);
  EXPECT_EQ(v[10].step, 6);
  EXPECT_EQ(v[10].generation, 1);
  EXPECT_EQ(v[11].kind, FaultKind::kExitHang);
  EXPECT_EQ(v[11].rank, 2);
  EXPECT_EQ(v[11].step, 0);
  EXPECT_EQ(v[11].generation, 0);
  EXPECT_EQ(v[12].kind, FaultKind::kExitCrash);
  EXPECT_EQ(v[12].code, 3);
  EXPECT_EQ(v[13].kind, FaultKind::kSdc);
  EXPECT_EQ(v[13].rank, 2);
  EXPECT_EQ(v[13].step, 5);
  EXPECT_EQ(v[13].site, SdcSite::kGrad);  // the default
  EXPECT_EQ(v[14].site, SdcSite::kActivation);
  EXPECT_EQ(v[15].site, SdcSite::kWeight);
}

TEST(FaultInjectionTest, RefusesMalformedSpecs) {
  for (const std::string bad : {"boom:rank=1",
                                "crash:rank=1",
                                "crash:rank=1:step=2:time=3",
                                "hang:step=3",
                                "stop:rank=1",
                                "slow:rank=0",
                                "spike:rank=0",
                                "spike:rank=0:step=3:factor=1",
                                "nan:rank=0:step=0",
                                "crash:rank=0:step=2:gen=some",
                                "nan:rank=x:step=2",
                                "push-loss:step=3",
                                "push-loss:rank=1:step=3",
                                "exit-hang:step=3",
                                "exit-hang:rank=1:step=3",
                                "exit-crash:rank=1:step=2",
                                "sdc:rank=1",
                                "sdc:step=3",
                                "sdc:rank=1:step=3:where=loss",
                                "hang:rank=1:step=3:where=grad",
                                "kill-in-ckpt:rank=0:step=3:at=eval",
                                "crash:rank=0:step=3:at=fenced"}) {
    Result<std::vector<Fault>> f = ParseFaults(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(f.status().message().find("--inject"), std::string::npos) << f.status().message();
  }
}

TEST(FaultInjectionTest, RefusesFaultsThatCouldNeverFire) {
  auto faults = ParseFaults("crash:rank=7:step=3");
  ASSERT_TRUE(faults.ok());
  Status st = ValidateFaults(*faults, {2, 12, 0});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 7 does not exist in a job of 2 rank(s)"), std::string::npos)
      << st.message();
  st = ValidateFaults(*ParseFaults("nan:rank=0:step=20"), {2, 12, 0});
  EXPECT_NE(st.message().find("step 20 is after the run's last step (12"), std::string::npos)
      << st.message();
  st = ValidateFaults(*ParseFaults("hang:rank=0:step=2:gen=2"), {2, 12, 1});
  EXPECT_NE(st.message().find("--max-restarts 1"), std::string::npos) << st.message();
  EXPECT_TRUE(ValidateFaults(*ParseFaults("hang:rank=1:step=12:gen=1"), {2, 12, 1}).ok());
  EXPECT_TRUE(ValidateFaults(*ParseFaults("nan:rank=1:step=99"), {2, 0, 0}).ok());  // unknown
  // Replica pushes exist between node agents only.
  st = ValidateFaults(*ParseFaults("push-loss:rank=1"), {2, 12, 0, 1});
  EXPECT_NE(st.message().find("several nodes"), std::string::npos) << st.message();
  EXPECT_TRUE(ValidateFaults(*ParseFaults("push-loss:rank=3"), {4, 12, 0, 2}).ok());
  // So is a commit's fence (etcd's record before the committing rank's folder).
  st = ValidateFaults(*ParseFaults("kill-in-ckpt:rank=0:step=6:at=fenced"), {2, 12, 0, 1});
  EXPECT_NE(st.message().find("several nodes"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("use at=written"), std::string::npos) << st.message();
  EXPECT_TRUE(
      ValidateFaults(*ParseFaults("kill-in-ckpt:rank=0:step=6:at=fenced"), {4, 12, 0, 2}).ok());
  EXPECT_TRUE(ValidateFaults(*ParseFaults("kill-in-ckpt:rank=0:step=6"), {2, 12, 0, 1}).ok());
}

// heal-fail: where and how a replacement fails as it heals; refused unless the job is live and
// something replaces that rank first.
TEST(FaultInjectionTest, HealFailNeedsALiveJobAndAReplacementOfItsRank) {
  auto f = ParseFaults(
      "heal-fail:rank=2,heal-fail:rank=1:at=form:how=stop:gen=1,heal-fail:rank=3:at=warmup");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)[0].kind, FaultKind::kHealFail);
  EXPECT_EQ((*f)[0].heal_at, HealPoint::kTransfer);  // the defaults
  EXPECT_FALSE((*f)[0].stop);
  EXPECT_EQ((*f)[1].heal_at, HealPoint::kForm);
  EXPECT_TRUE((*f)[1].stop);
  EXPECT_EQ((*f)[1].generation, 1);
  EXPECT_EQ((*f)[2].heal_at, HealPoint::kWarmUp);
  for (const std::string bad : {"heal-fail:rank=1:step=3", "heal-fail:rank=1:at=sync",
                                "heal-fail:rank=1:how=exit", "heal-fail:at=form"}) {
    EXPECT_FALSE(ParseFaults(bad).ok()) << bad;
  }
  JobShape live{4, 16, 0};
  live.live = true;
  EXPECT_TRUE(ValidateFaults(*ParseFaults("crash:rank=2:step=6,heal-fail:rank=2"), live).ok());
  EXPECT_TRUE(
      ValidateFaults(*ParseFaults("stop:rank=2:step=6,heal-fail:rank=2:how=stop"), live).ok());
  Status st = ValidateFaults(*ParseFaults("crash:rank=1:step=6,heal-fail:rank=2"), live);
  EXPECT_NE(st.message().find("rank 2 is never replaced"), std::string::npos) << st.message();
  st = ValidateFaults(*ParseFaults("crash:rank=2:step=6,heal-fail:rank=2:gen=1"), live);
  EXPECT_NE(st.message().find("never replaced"), std::string::npos) << st.message();
  // HSDP 2 x 2: rank 0 is replaced with rank 1, its replica; rank 2 is not.
  JobShape hsdp = live;
  hsdp.live_replica_ranks = 2;
  EXPECT_TRUE(ValidateFaults(*ParseFaults("crash:rank=1:step=6,heal-fail:rank=0"), hsdp).ok());
  st = ValidateFaults(*ParseFaults("crash:rank=1:step=6,heal-fail:rank=2"), hsdp);
  EXPECT_NE(st.message().find("rank 2 is never replaced"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("or of its replica (ranks 2..3)"), std::string::npos) << st.message();
  st = ValidateFaults(*ParseFaults("crash:rank=2:step=6,heal-fail:rank=2"), {4, 16, 0});
  EXPECT_NE(st.message().find("needs resilience.mode = \"live\""), std::string::npos)
      << st.message();
}

TEST(FaultInjectionTest, UnfiredFaultsAreTheOnesWithoutARecordInTheirGeneration) {
  auto faults =
      *ParseFaults("crash:rank=1:step=3,spike:rank=0:step=4:gen=all,nan:rank=0:step=5:gen=1");
  std::vector<FiredFault> fired = {{0, 1, 0, 3}};
  std::vector<Fault> left = UnfiredFaults(faults, fired);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].index, 1);
  EXPECT_EQ(left[1].index, 2);
  fired.push_back({1, 0, 3, 4});  // gen=all: any generation counts
  fired.push_back({2, 0, 0, 5});  // the wrong generation does not
  left = UnfiredFaults(faults, fired);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].text, "nan:rank=0:step=5:gen=1");
}

TEST(FaultInjectionTest, PoissonScheduleTakesRatesPerKindInThreeUnitsAndASeed) {
  auto f = ParseFaults("poisson:crash=36/h:hang=0.5/min:nan=0.01/s:seed=7");
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->size(), 1u);
  const Fault& p = (*f)[0];
  EXPECT_EQ(p.kind, FaultKind::kPoisson);
  EXPECT_DOUBLE_EQ(p.rates.crash, 0.01);
  EXPECT_DOUBLE_EQ(p.rates.hang, 0.5 / 60);
  EXPECT_DOUBLE_EQ(p.rates.nan, 0.01);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_EQ((*ParseFaults("poisson:crash=10/h"))[0].seed, 1u);  // the default seed
  for (const std::string bad : {"poisson", "poisson:crash=0/h", "poisson:crash=10",
                                "poisson:crash=10/day", "poisson:crash=-1/h", "poisson:boom=1/h",
                                "poisson:crash=1/h:seed=x", "poisson:crash=1/h:gen=1"}) {
    Result<std::vector<Fault>> bad_f = ParseFaults(bad);
    ASSERT_FALSE(bad_f.ok()) << bad;
    EXPECT_NE(bad_f.status().message().find("--inject " + bad), std::string::npos)
        << bad_f.status().message();
  }
  // What the launcher checks before any rank starts (world, steps, max_restarts, nnodes,
  // on_nonfinite = restart).
  const auto one = *ParseFaults("poisson:crash=10/h:nan=5/h");
  EXPECT_TRUE(ValidateFaults(one, {2, 100, 10, 1, true}).ok());
  Status st = ValidateFaults(one, {2, 100, 0, 1, true});
  EXPECT_NE(st.message().find("--max-restarts"), std::string::npos) << st.message();
  st = ValidateFaults(one, {2, 100, 10, 1, false});
  EXPECT_NE(st.message().find("training.on_nonfinite"), std::string::npos) << st.message();
  EXPECT_TRUE(ValidateFaults(*ParseFaults("poisson:crash=10/h"), {2, 100, 10, 1, false}).ok());
  st = ValidateFaults(one, {4, 100, 10, 2, true});
  EXPECT_NE(st.message().find("single-node"), std::string::npos) << st.message();
  st = ValidateFaults(one, {2, 0, 10, 1, true});
  EXPECT_NE(st.message().find("`train` command"), std::string::npos) << st.message();
  st = ValidateFaults(*ParseFaults("poisson:crash=1/h,poisson:hang=1/h"), {2, 100, 10, 1, true});
  EXPECT_NE(st.message().find("one poisson schedule"), std::string::npos) << st.message();
  // Live recovery: crashes and hangs, not NaN losses (they restart every replica).
  JobShape live{2, 100, 10, 1, true};
  live.live = true;
  EXPECT_TRUE(ValidateFaults(*ParseFaults("poisson:crash=10/h:hang=5/h"), live).ok());
  st = ValidateFaults(one, live);
  EXPECT_NE(st.message().find("crashes and hangs only"), std::string::npos) << st.message();
  // The launcher's: never "unfired", whatever it drew.
  EXPECT_TRUE(UnfiredFaults(one, {}).empty());
}

RankContext Context(const TempDir& dir, const std::string& inject, int generation = 0) {
  RankContext ctx;
  ctx.supervised = true;
  ctx.heartbeat_dir = dir.path();
  ctx.inject = inject;
  ctx.generation = generation;
  ctx.launch_time_unix = WallNow();
  return ctx;
}

TEST(FaultInjectorTest, KeepsOnlyThisRanksFaultsOfThisGenerationAndRecordsWhatFired) {
  TempDir dir;
  const std::string spec =
      "spike:rank=1:step=3:factor=8,nan:rank=1:step=4:gen=1,slow:rank=0:factor=2";
  auto none = FaultInjector::Create(Context(dir, spec), 2, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto f = FaultInjector::Create(Context(dir, spec), 1, nullptr);
  ASSERT_TRUE(f.ok());
  ASSERT_NE(*f, nullptr);
  EXPECT_EQ((*f)->LossFactor(2), 1);
  EXPECT_FALSE((*f)->PoisonLoss(4));  // generation 1's fault
  EXPECT_EQ((*f)->LossFactor(3), 8);
  EXPECT_EQ((*f)->LossFactor(3), 8);  // recorded once
  std::vector<FiredFault> fired = ReadFiredFaults(dir.path());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].index, 0);
  EXPECT_EQ(fired[0].rank, 1);
  EXPECT_EQ(fired[0].step, 3);
  auto gen1 = FaultInjector::Create(Context(dir, spec, 1), 1, nullptr);
  ASSERT_TRUE((*gen1)->PoisonLoss(4));
  EXPECT_EQ(UnfiredFaults(*ParseFaults(spec), ReadFiredFaults(dir.path())).size(), 1u);  // slow
}

// heal-fail strikes a replacement (live_join) only, at its point, and only the first one: a
// second replacement of the same generation finds the first one's record and heals.
TEST(FaultInjectorTest, HealFailKillsTheFirstReplacementOnly) {
  TempDir dir;
  const std::string spec = "crash:rank=2:step=6,heal-fail:rank=2";
  RankContext original = Context(dir, spec);
  auto f = FaultInjector::Create(original, 2, nullptr);
  ASSERT_TRUE(f.ok() && *f);
  (*f)->DuringHeal(HealPoint::kTransfer);  // not a replacement: nothing
  RankContext replacement = Context(dir, spec);
  replacement.live_join = true;
  auto r = FaultInjector::Create(replacement, 2, nullptr);
  ASSERT_TRUE(r.ok() && *r);
  (*r)->DuringHeal(HealPoint::kForm);  // another point: nothing
  EXPECT_TRUE(ReadFiredFaults(dir.path()).empty());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    (*r)->DuringHeal(HealPoint::kTransfer);
    std::_Exit(0);  // not reached when the fault fires
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  const std::vector<FiredFault> fired = ReadFiredFaults(dir.path());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].index, 1);
  auto second = FaultInjector::Create(replacement, 2, nullptr);
  (*second)->DuringHeal(HealPoint::kTransfer);  // the next replacement heals
  EXPECT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
}

// A defective device: from the fault's step on, every step (recorded as fired once).
TEST(FaultInjectorTest, SdcActsFromItsStepOnAndIsRecordedOnce) {
  TempDir dir;
  auto f = FaultInjector::Create(Context(dir, "sdc:rank=2:step=5:where=weight"), 2, nullptr);
  ASSERT_TRUE(f.ok() && *f);
  EXPECT_FALSE((*f)->SdcAt(4).has_value());
  EXPECT_EQ((*f)->SdcAt(5), SdcSite::kWeight);
  EXPECT_EQ((*f)->SdcAt(9), SdcSite::kWeight);
  const std::vector<FiredFault> fired = ReadFiredFaults(dir.path());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].step, 5);
}

// A poisson schedule with NaNs: every rank, in every generation, poisons the step after the
// launcher's request appears, once per request.
TEST(FaultInjectorTest, PoissonNanPoisonsTheStepAfterTheLaunchersRequest) {
  TempDir dir;
  EXPECT_EQ(*FaultInjector::Create(Context(dir, "poisson:crash=10/h"), 1, nullptr), nullptr);
  auto f = FaultInjector::Create(Context(dir, "poisson:crash=10/h:nan=10/h", 3), 1, nullptr);
  ASSERT_TRUE(f.ok() && *f);
  EXPECT_FALSE((*f)->PoisonLoss(5));
  ASSERT_TRUE(LocalFs().WriteFileAtomic(NanRequestPath(dir.path(), 0), "nan\n").ok());
  EXPECT_FALSE((*f)->PoisonLoss(6));  // rank 0's request
  ASSERT_TRUE(LocalFs().WriteFileAtomic(NanRequestPath(dir.path(), 1), "nan\n").ok());
  EXPECT_TRUE((*f)->PoisonLoss(7));
  EXPECT_FALSE((*f)->PoisonLoss(8));  // consumed
  EXPECT_FALSE(std::filesystem::exists(NanRequestPath(dir.path(), 1)));
}

TEST(FaultInjectorTest, CheckpointFailureIsAnIoErrorOfThatStep) {
  TempDir dir;
  auto f = FaultInjector::Create(Context(dir, "ckpt-fail:step=6"), 0, nullptr);
  ASSERT_TRUE(f.ok() && *f);
  EXPECT_TRUE((*f)->CheckpointHook(3, CheckpointPhase::kWritten, "/x").ok());
  Status st = (*f)->CheckpointHook(6, CheckpointPhase::kWritten, "/x/step_6");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
}

// A crash by time fires from the timer, wherever the rank is: here in the middle of a sleep that
// would otherwise last a minute. It reports first, then exits with the asked code.
TEST(FaultInjectorDeathTest, CrashByTimeFiresFromTheTimer) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 1, 0);
  RankContext ctx = Context(dir, "crash:rank=1:time=0.2:how=exit:code=42");
  EXPECT_EXIT(
      {
        auto f = FaultInjector::Create(ctx, 1, &reporter);
        std::this_thread::sleep_for(std::chrono::seconds(60));
      },
      ::testing::ExitedWithCode(42), "injected fault: crash \\(exit\\) at 0.2s");
  std::optional<ExitReport> r = ReadExitReport(dir.path(), 1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, 42);
  EXPECT_EQ(r->kind, FailureKind::kCrash);
  ASSERT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
  EXPECT_EQ(ReadFiredFaults(dir.path())[0].index, 0);
}

// crash at step=0: in the setup (OnSetup), never at a step's start, and a crash by time is not
// one (its step is 0 too).
TEST(FaultInjectorDeathTest, CrashAtStepZeroFiresInTheSetupOnly) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 1, 0);
  Result<std::vector<Fault>> parsed = ParseFaults("crash:rank=1:step=0");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)[0].step, 0);
  EXPECT_EQ((*parsed)[0].time_s, 0);
  {
    auto timed = FaultInjector::Create(Context(dir, "crash:rank=1:time=600"), 1, &reporter);
    ASSERT_TRUE(timed.ok() && *timed);
    (*timed)->OnSetup();  // the timer's, not the setup's
  }
  EXPECT_TRUE(ReadFiredFaults(dir.path()).empty());
  RankContext ctx = Context(dir, "crash:rank=1:step=0:how=exit:code=43");
  EXPECT_EXIT(
      {
        auto f = FaultInjector::Create(ctx, 1, &reporter);
        (*f)->OnStepBegin(1);
        (*f)->OnSetup();
      },
      ::testing::ExitedWithCode(43), "injected fault: crash \\(exit\\) in its setup");
  ASSERT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
  EXPECT_EQ(ReadFiredFaults(dir.path())[0].step, 0);
}

// crash at=spike fires where the trainer finds the step's loss spike, not at the step's start.
TEST(FaultInjectorDeathTest, CrashAtSpikeFiresAtTheSpikeOnly) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 1, 0);
  Result<std::vector<Fault>> parsed = ParseFaults("crash:rank=1:step=7:at=spike");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)[0].at, Fault::At::kSpike);
  EXPECT_FALSE(ParseFaults("crash:rank=1:time=5:at=spike").ok());
  EXPECT_FALSE(ParseFaults("hang:rank=1:step=5:at=spike").ok());
  RankContext ctx = Context(dir, "crash:rank=1:step=7:at=spike:how=exit:code=44");
  EXPECT_EXIT(
      {
        auto f = FaultInjector::Create(ctx, 1, &reporter);
        if ((*f)->CrashDue(7)) std::_Exit(3);  // not a start-of-step crash
        (*f)->OnStepBegin(7);
        (*f)->OnLossSpike(6);
        (*f)->OnLossSpike(7);
      },
      ::testing::ExitedWithCode(44), "injected fault: crash \\(exit\\) at step 7's loss spike");
  ASSERT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
  EXPECT_EQ(ReadFiredFaults(dir.path())[0].step, 7);
}

// kill-in-ckpt at=fenced fires once the commit is fenced only, not when the files are written
// (at=written, the default, the other way round).
TEST(FaultInjectorDeathTest, KillInCheckpointAtFencedFiresAfterTheFenceOnly) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 0, 0);
  Result<std::vector<Fault>> parsed =
      ParseFaults("kill-in-ckpt:rank=0:step=6:at=fenced,kill-in-ckpt:rank=1:step=6");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)[0].ckpt_at, CheckpointPhase::kFenced);
  EXPECT_EQ((*parsed)[1].ckpt_at, CheckpointPhase::kWritten);
  RankContext ctx = Context(dir, "kill-in-ckpt:rank=0:step=6:at=fenced");
  EXPECT_EXIT(
      {
        auto f = FaultInjector::Create(ctx, 0, &reporter);
        if (!(*f)->CheckpointHook(6, CheckpointPhase::kWritten, "/x/step_6").ok()) std::_Exit(3);
        if (!(*f)->CheckpointHook(3, CheckpointPhase::kFenced, "/x/step_3").ok()) std::_Exit(4);
        (void)(*f)->CheckpointHook(6, CheckpointPhase::kFenced, "/x/step_6");
        std::_Exit(5);
      },
      ::testing::KilledBySignal(SIGKILL), "");
  ASSERT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
  EXPECT_EQ(ReadFiredFaults(dir.path())[0].step, 6);
}

// crash at=eval fires in the step's evaluation only: not at its start, nor at its loss spike.
TEST(FaultInjectorDeathTest, CrashAtEvalFiresInTheEvaluationOnly) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 1, 0);
  Result<std::vector<Fault>> parsed = ParseFaults("crash:rank=1:step=5:at=eval");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)[0].at, Fault::At::kEval);
  Result<std::vector<Fault>> no_step = ParseFaults("crash:rank=1:step=0:at=eval");
  ASSERT_FALSE(no_step.ok());
  EXPECT_NE(no_step.status().message().find("the step whose evaluation it strikes"),
            std::string::npos)
      << no_step.status().message();
  RankContext ctx = Context(dir, "crash:rank=1:step=5:at=eval:how=exit:code=45");
  EXPECT_EXIT(
      {
        auto f = FaultInjector::Create(ctx, 1, &reporter);
        if ((*f)->CrashDue(5)) std::_Exit(3);  // not a start-of-step crash
        (*f)->OnStepBegin(5);
        (*f)->OnLossSpike(5);
        (*f)->OnEvaluated(4);
        (*f)->OnEvaluated(5);
      },
      ::testing::ExitedWithCode(45), "injected fault: crash \\(exit\\) at step 5's evaluation");
  ASSERT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
  EXPECT_EQ(ReadFiredFaults(dir.path())[0].step, 5);
}

// crash at=reduce fires right before the step's gradient reduction only: not at its start, its
// loss spike or its evaluation, nor before another step's reduction.
TEST(FaultInjectorDeathTest, CrashAtReduceFiresBeforeTheGradientReductionOnly) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 1, 0);
  Result<std::vector<Fault>> parsed = ParseFaults("crash:rank=1:step=6:at=reduce");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)[0].at, Fault::At::kReduce);
  Result<std::vector<Fault>> no_step = ParseFaults("crash:rank=1:step=0:at=reduce");
  ASSERT_FALSE(no_step.ok());
  EXPECT_NE(no_step.status().message().find("the step whose gradient reduction it strikes"),
            std::string::npos)
      << no_step.status().message();
  RankContext ctx = Context(dir, "crash:rank=1:step=6:at=reduce:how=exit:code=46");
  EXPECT_EXIT(
      {
        auto f = FaultInjector::Create(ctx, 1, &reporter);
        if ((*f)->CrashDue(6)) std::_Exit(3);  // not a start-of-step crash
        (*f)->OnStepBegin(6);
        (*f)->OnLossSpike(6);
        (*f)->OnEvaluated(6);
        (*f)->BeforeGradientReduce(5, 0.1);
        (*f)->BeforeGradientReduce(6, 0.1);
      },
      ::testing::ExitedWithCode(46),
      "injected fault: crash \\(exit\\) at step 6's gradient reduction");
  ASSERT_EQ(ReadFiredFaults(dir.path()).size(), 1u);
  EXPECT_EQ(ReadFiredFaults(dir.path())[0].step, 6);
}

}  // namespace
}  // namespace tenax::protocol
