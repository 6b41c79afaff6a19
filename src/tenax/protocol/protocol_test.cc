// The launcher-rank seam: exit codes and their restart decision, phase and kind names, the rank
// context read from the environment (what the launcher writes is what the rank reads), exit
// reports, and the peer-lost classification of collective errors.
#include "tenax/protocol/protocol.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tenax/core/temp_dir.h"
#include "tenax/protocol/exit_report.h"
#include "tenax/protocol/heartbeat.h"
#include "tenax/protocol/rank_context.h"

namespace tenax::protocol {
namespace {

using testing::TempDir;

TEST(ProtocolTest, ExitCodesSayWhetherARestartHelps) {
  for (ExitCode c : {ExitCode::kInvalidArgument, ExitCode::kNotFound, ExitCode::kDataError,
                     ExitCode::kNumerical, ExitCode::kBusy}) {
    EXPECT_FALSE(Restartable(ToInt(c))) << ToInt(c);
  }
  for (ExitCode c :
       {ExitCode::kFailure, ExitCode::kIoError, ExitCode::kInternal, ExitCode::kUnavailable,
        ExitCode::kCollectiveTimeout, ExitCode::kPeerLost, ExitCode::kHang, ExitCode::kStraggler}) {
    EXPECT_TRUE(Restartable(ToInt(c))) << ToInt(c);
  }
  EXPECT_TRUE(Restartable(128 + 9));  // SIGKILL
  EXPECT_EQ(ToInt(FromStatus(InvalidArgument("x"))), 2);
  EXPECT_EQ(ToInt(FromStatus(PeerLost("x"))), 10);
  EXPECT_EQ(ToInt(FromStatus(Busy("x"))), 12);
  EXPECT_EQ(ToInt(FromStatus(Status::Ok())), 0);
  EXPECT_NE(DescribeExitCode(137).find("signal 9"), std::string::npos);
}

TEST(ProtocolTest, WaitStatusBecomesTheShellsCode) {
  const pid_t exited = ::fork();
  if (exited == 0) ::_exit(5);
  int status = 0;
  ::waitpid(exited, &status, 0);
  EXPECT_EQ(FromWaitStatus(status), 5);
  const pid_t killed = ::fork();
  if (killed == 0) {
    ::pause();
    ::_exit(0);
  }
  ::kill(killed, SIGKILL);
  ::waitpid(killed, &status, 0);
  EXPECT_EQ(FromWaitStatus(status), 137);
}

TEST(ProtocolTest, NamesRoundTrip) {
  for (Phase p : {Phase::kSetup, Phase::kReady, Phase::kTrain, Phase::kCheckpoint,
                  Phase::kNonFinite, Phase::kLossSpike, Phase::kEval, Phase::kFinish}) {
    EXPECT_EQ(ParsePhase(PhaseName(p)), p);
  }
  EXPECT_FALSE(ParsePhase("bogus"));
  for (FailureKind k :
       {FailureKind::kCrash, FailureKind::kCrashInCheckpoint, FailureKind::kCheckpointWrite,
        FailureKind::kIoError, FailureKind::kNonFinite, FailureKind::kLossSpike, FailureKind::kHang,
        FailureKind::kStraggler, FailureKind::kSetup, FailureKind::kCorruptCheckpoint,
        FailureKind::kLauncherLost, FailureKind::kPeerLost}) {
    EXPECT_EQ(ParseFailureKind(FailureKindName(k)), k);
  }
  EXPECT_TRUE(BlamesSlot(FailureKind::kCrash));
  EXPECT_FALSE(BlamesSlot(FailureKind::kIoError));
  EXPECT_FALSE(BlamesSlot(FailureKind::kPeerLost));
}

// What the launcher puts into a process's environment and assignment is what the rank reads.
TEST(RankContextTest, ReadsWhatTheLauncherWrites) {
  StandbySetup s;
  s.slot = 3;
  s.launcher_pid = 4242;
  s.launcher_fd = 7;
  s.run_lock_fd = 9;
  s.launch_time_unix = 1700000000.25;
  s.heartbeat_dir = "/tmp/beats";
  s.inject = "crash:rank=1:step=3";
  s.ram_folder = "/dev/shm/tenax-ram-run-4242-0a1b2c3d";
  s.job_secret = "5ec12e7";
  s.live_store.endpoints = {"10.0.0.2:2379", "etcd-b:2380"};
  s.live_store.prefix = "/tenax/jobs/j1/live/";
  s.live_store.ca_file = "/etc/tenax/ca.pem";
  s.live_store.key_file = "/etc/tenax/node.key";
  Assignment a;
  a.rank = 5;
  a.world = 8;
  a.generation = 2;
  a.run_elapsed_s = 7200.5;
  a.master_addr = "10.0.0.1";
  a.master_port = 1234;
  a.live_incarnation = 3;
  std::map<std::string, std::string> env;
  auto put = [&](const std::string& kv) {
    env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  };
  for (const std::string& kv : StandbyEnvironment(s)) put(kv);
  std::stringstream words(AssignmentLine(a));
  for (std::string kv; words >> kv;) put(kv);
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  Result<RankContext> ctx = ReadRankContext([&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  EXPECT_TRUE(ctx->supervised);
  EXPECT_EQ(ctx->launcher_pid, 4242);
  EXPECT_EQ(ctx->launcher_fd, 7);
  EXPECT_EQ(ctx->run_lock_fd, 9);
  EXPECT_EQ(ctx->slot, 3);
  EXPECT_EQ(ctx->generation, 2);
  EXPECT_NEAR(ctx->launch_time_unix, 1700000000.25, 1e-3);
  EXPECT_NEAR(ctx->run_elapsed_s, 7200.5, 1e-3);
  EXPECT_EQ(ctx->heartbeat_dir, "/tmp/beats");
  EXPECT_EQ(ctx->inject, "crash:rank=1:step=3");
  EXPECT_EQ(ctx->ram_folder, "/dev/shm/tenax-ram-run-4242-0a1b2c3d");
  EXPECT_EQ(ctx->job_secret, "5ec12e7");
  EXPECT_TRUE(ctx->live_join);
  EXPECT_EQ(ctx->live_incarnation, 3);
  EXPECT_EQ(env["TENAX_LIVE_STORE"], "etcd://10.0.0.2:2379,etcd-b:2380/tenax/jobs/j1/live/");
  EXPECT_EQ(ctx->live_store, s.live_store);  // the certificate left out stays out
  // A first rank (no incarnation) is no replacement; a malformed one is refused.
  a.live_incarnation = 0;
  EXPECT_EQ(AssignmentLine(a).find("TENAX_LIVE_JOIN"), std::string::npos);
  env["TENAX_LIVE_JOIN"] = "yes";
  EXPECT_FALSE(ReadRankContext([&](const char* n) -> const char* {
                 auto it = env.find(n);
                 return it == env.end() ? nullptr : it->second.c_str();
               }).ok());
}

TEST(RankContextTest, NoVariablesIsAnUnsupervisedProcess) {
  Result<RankContext> ctx = ReadRankContext([](const char*) -> const char* { return nullptr; });
  ASSERT_TRUE(ctx.ok());
  EXPECT_FALSE(ctx->supervised);
  EXPECT_EQ(ctx->generation, 0);
  EXPECT_EQ(ctx->launcher_fd, -1);
  EXPECT_TRUE(ctx->heartbeat_dir.empty());
  EXPECT_TRUE(ctx->ram_folder.empty());
  EXPECT_TRUE(ctx->job_secret.empty());
}

TEST(RankContextTest, MalformedValuesNameTheVariable) {
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{kEnvRestartCount, "two"},
                                                        {kEnvRestartCount, "-1"},
                                                        {kEnvRunElapsed, "soon"},
                                                        {kEnvRunElapsed, "nan"},
                                                        {kEnvLaunchTime, "inf"},
                                                        {kEnvLauncherFd, "x"},
                                                        {kEnvLiveStore, "http://h:1/p/"},
                                                        {kEnvLiveStore, "etcd://h:1"},
                                                        {kEnvLiveStore, "etcd://h:1/p"},
                                                        {kEnvLiveStore, "etcd://h/p/"},
                                                        {kEnvLiveStore, "etcd://h:1,:2/p/"},
                                                        {kEnvLiveStore, "etcd://h:99999/p/"}}) {
    Result<RankContext> ctx = ReadRankContext(
        [&](const char* n) -> const char* { return name == n ? value.c_str() : nullptr; });
    ASSERT_FALSE(ctx.ok()) << name << "=" << value;
    EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ctx.status().message().find(name), std::string::npos) << ctx.status().message();
  }
}

TEST(ExitReportTest, WrittenReportIsReadBack) {
  TempDir dir;
  ExitReporter(dir.path(), 3, 1).Report(5, FailureKind::kCheckpointWrite, "disk full");
  std::optional<ExitReport> r = ReadExitReport(dir.path(), 3);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->generation, 1);
  EXPECT_EQ(r->code, 5);
  EXPECT_EQ(r->kind, FailureKind::kCheckpointWrite);
  EXPECT_FALSE(r->secondary);
  EXPECT_EQ(r->cause, "disk full");
  EXPECT_EQ(r->pid, static_cast<int>(::getpid()));
  EXPECT_GT(r->mono_s, 0);
  ExitReporter(dir.path(), 2, 1).Report(10, FailureKind::kPeerLost, "Connection closed by peer");
  EXPECT_TRUE(ReadExitReport(dir.path(), 2)->secondary);
  EXPECT_FALSE(ReadExitReport(dir.path(), 7));
  ExitReporter().Report(5, FailureKind::kCrash, "no folder: a no-op");
}

TEST(HeartbeatTest, EvaluationBatchesShowAsProgressWithoutAStep) {
  // The launcher counts a change of step or of `work` as progress (launch/supervisor.cc): a long
  // evaluation after step 12 must keep changing `work` while the step stays 12.
  TempDir dir;
  HeartbeatWriter w(dir.path(), 0, 2);
  w.StepDone(12, 0.1, 0.1, 1000);
  std::optional<Beat> b = ReadHeartbeat(dir.path(), 0);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->work, 0);
  EXPECT_EQ(b->phase, Phase::kTrain);
  w.EvalProgress(12);  // the first batch of an evaluation always beats
  b = ReadHeartbeat(dir.path(), 0);
  EXPECT_EQ(b->step, 12);
  EXPECT_EQ(b->phase, Phase::kEval);
  EXPECT_EQ(b->work, 1);
  EXPECT_EQ(b->generation, 2);
  for (int i = 0; i < 50; ++i) w.EvalProgress(12);  // counted; beats at most every 0.2 s
  w.StepDone(13, 0.1, 0.1, 1000);
  b = ReadHeartbeat(dir.path(), 0);
  EXPECT_EQ(b->step, 13);
  EXPECT_EQ(b->work, 51);
}

TEST(HeartbeatTest, AHealedBeatSaysTheStepOfTheStateItReceived) {
  // A replacement's last beat is its start-up's (step 0 here); the beat rewritten with its new
  // epoch keeps that step, so the state's step travels on its own (the launcher counts the steps
  // the others trained short-handed from it).
  TempDir dir;
  HeartbeatWriter w(dir.path(), 2, 1);
  w.Ready(0, 0, dir.path());
  std::optional<Beat> b = ReadHeartbeat(dir.path(), 2);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->healed_step, -1);
  EXPECT_EQ(b->healed_bytes, 0);
  w.SetLiveEpoch(3);
  w.SetHealed(1, 4096, 0.25, 6);
  w.Refresh();
  b = ReadHeartbeat(dir.path(), 2);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->step, 0);
  EXPECT_EQ(b->live_epoch, 3);
  EXPECT_EQ(b->healed_from, 1);
  EXPECT_EQ(b->healed_bytes, 4096);
  EXPECT_DOUBLE_EQ(b->healed_s, 0.25);
  EXPECT_EQ(b->healed_step, 6);
}

TEST(HeartbeatTest, TheFinishBeatKeepsTheLastStepAndItsTotals) {
  // The launcher tells a rank stuck in its teardown from one stuck in training by this beat.
  TempDir dir;
  HeartbeatWriter w(dir.path(), 1, 0);
  w.StepDone(48, 0.25, 0.2, 1000);
  w.CheckpointBegin(48);
  w.CheckpointDone(48, 0.5);
  w.Finished(48);
  std::optional<Beat> b = ReadHeartbeat(dir.path(), 1);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, Phase::kFinish);
  EXPECT_EQ(b->step, 48);
  EXPECT_DOUBLE_EQ(b->steps_s, 0.25);
  EXPECT_DOUBLE_EQ(b->checkpoint_s, 0.5);
}

TEST(ExitReportTest, RecognisesALostPeer) {
  EXPECT_TRUE(IsPeerLostError(
      "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:42886"));
  EXPECT_TRUE(IsPeerLostError("Connection reset by peer"));
  EXPECT_TRUE(IsPeerLostError("[../gloo/transport/tcp/pair.cc:575] Write error: Broken pipe"));
  // NCCL through c10d (messages as PyTorch 2.x with NCCL 2.2x prints them).
  EXPECT_TRUE(IsPeerLostError(
      "NCCL error in: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3763, remote process "
      "exited or there was a network error, NCCL version 2.28.9\nncclRemoteError: A call failed "
      "possibly due to a network error or a remote process exiting prematurely."));
  EXPECT_TRUE(
      IsPeerLostError("misc/socket.cc:538 NCCL WARN Net : Connection closed by remote "
                      "peer node-7<47861>"));
  EXPECT_TRUE(IsPeerLostError("NCCL communicator was aborted on rank 3."));
  EXPECT_FALSE(IsPeerLostError("NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"));
  EXPECT_FALSE(IsPeerLostError("CUDA out of memory. Tried to allocate 2.00 GiB"));
  EXPECT_FALSE(IsPeerLostError("Expected all tensors to be on the same device"));
  EXPECT_FALSE(IsPeerLostError("shape mismatch"));
}

// A Gloo transport thread throwing "Connection closed by peer" ends the process through the
// terminate handler: exit code kPeerLost and a secondary report, not an abort.
TEST(ExitReportDeathTest, PeerLostOnAnotherThreadExitsAsSecondary) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 1, 0);
  EXPECT_EXIT(
      {
        InstallTerminateHandler(&reporter);
        std::thread([] {
          throw std::runtime_error("[pair.cc:598] Connection closed by peer [127.0.0.1]:1");
        }).join();
      },
      ::testing::ExitedWithCode(ToInt(ExitCode::kPeerLost)), "a peer was lost");
  std::optional<ExitReport> r = ReadExitReport(dir.path(), 1);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->secondary);
  EXPECT_EQ(r->code, ToInt(ExitCode::kPeerLost));
}

TEST(ExitReportDeathTest, OtherUncaughtExceptionsAbortWithAReport) {
  TempDir dir;
  static ExitReporter reporter;
  reporter = ExitReporter(dir.path(), 0, 0);
  EXPECT_DEATH(
      {
        InstallTerminateHandler(&reporter);
        std::thread([] { throw std::logic_error("a bug"); }).join();
      },
      "uncaught exception: a bug");
  std::optional<ExitReport> r = ReadExitReport(dir.path(), 0);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->secondary);
  EXPECT_EQ(r->kind, FailureKind::kCrash);
  EXPECT_NE(r->cause.find("a bug"), std::string::npos);
}

}  // namespace
}  // namespace tenax::protocol
