// What the agents tell Slurm: the exact scontrol and sbatch commands, run off the caller's thread,
// their failures logged rather than returned, and the flags refused outside Slurm before anything
// starts. tests/slurm_e2e_test.cc runs them against a real Slurm cluster.
#include "tenax/launch/scheduler.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <mutex>

#include "tenax/core/temp_dir.h"

namespace tenax::launch {
namespace {

struct Recorder {
  std::mutex mu;
  std::vector<std::vector<std::string>> ran;
  SchedulerActions::Ran answer{0, "4242;cluster\n"};
  SchedulerActions::Runner Runner() {
    return [this](const std::vector<std::string>& argv) -> Result<SchedulerActions::Ran> {
      std::lock_guard<std::mutex> lock(mu);
      ran.push_back(argv);
      return answer;
    };
  }
};

SchedulerOptions Options() {
  SchedulerOptions o;
  o.drain = true;
  o.min_spares = 1;
  o.spare_job = "/shared/deploy/slurm/tenax-spare.sbatch";
  o.job_id = "llama";
  return o;
}

TEST(SchedulerActions, DrainsWithTenaxsReason) {
  Recorder rec;
  SchedulerActions s(Options(), rec.Runner());
  s.Drain("gpu017", "job llama: node lost in generation 3");
  s.Drain("", "an agent outside Slurm: nothing to drain");
  s.Flush();
  ASSERT_EQ(rec.ran.size(), 1u);
  EXPECT_EQ(rec.ran[0],
            (std::vector<std::string>{"scontrol", "update", "NodeName=gpu017", "State=DRAIN",
                                      "Reason=tenax: job llama: node lost in "
                                      "generation 3"}));
}

TEST(SchedulerActions, DrainsNothingUnlessAsked) {
  Recorder rec;
  SchedulerOptions o = Options();
  o.drain = false;
  SchedulerActions s(o, rec.Runner());
  s.Drain("gpu017", "lost");
  s.Flush();
  EXPECT_TRUE(rec.ran.empty());
}

TEST(SchedulerActions, RequestsASpareAndReadsTheJobId) {
  Recorder rec;
  SchedulerActions s(Options(), rec.Runner());
  Result<std::string> job = Internal("not called");
  s.RequestSpare("g2-0", [&](const Result<std::string>& j) { job = j; });
  s.Flush();
  ASSERT_EQ(rec.ran.size(), 1u);
  EXPECT_EQ(rec.ran[0],
            (std::vector<std::string>{"sbatch", "--parsable", "--job-name=tenax-spare-llama",
                                      "--export=ALL,TENAX_JOB_ID=llama,TENAX_SPARE_REQUEST=g2-0",
                                      "/shared/deploy/slurm/tenax-spare.sbatch"}));
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(*job, "4242");
}

TEST(SchedulerActions, AFailingSchedulerIsAnErrorForTheCallbackOnly) {
  Recorder rec;
  rec.answer = {1, "sbatch: error: Batch job submission failed: Invalid partition name\n"};
  SchedulerActions s(Options(), rec.Runner());
  Result<std::string> job = std::string("unset");
  s.RequestSpare("g1-0", [&](const Result<std::string>& j) { job = j; });
  s.Drain("gpu003", "straggler");  // logged, nothing thrown or returned
  s.Flush();
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("Invalid partition name"), std::string::npos);
  EXPECT_EQ(rec.ran.size(), 2u);
}

TEST(SchedulerActions, TheRealRunnerTimesOutAHungCommand) {
  // The default runner: a command that never ends is cut at command_timeout_s.
  SchedulerOptions o = Options();
  o.command_timeout_s = 0.5;
  testing::TempDir dir;
  const std::string fake = dir.path() + "/sbatch";
  std::ofstream(fake) << "#!/bin/sh\nsleep 30\n";
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  o.spare_job = fake;  // any file
  SchedulerActions s(o);
  Result<std::string> job = std::string("unset");
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir.path() + ":" + path).c_str(), 1);
  s.RequestSpare("g1-0", [&](const Result<std::string>& j) { job = j; });
  s.Flush();
  ::setenv("PATH", path.c_str(), 1);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("exit code 124): no answer within 0.5 s"),
            std::string::npos)
      << job.status().message();
}

TEST(CheckSchedulerOptions, RefusesWhatCannotWork) {
  SchedulerEnv outside;
  SchedulerEnv slurm;
  slurm.node = "gpu001";
  slurm.job = "77";
  EXPECT_TRUE(CheckSchedulerOptions(SchedulerOptions(), outside).ok());
  Status st = CheckSchedulerOptions(Options(), outside);
  EXPECT_NE(st.message().find("not in a Slurm job step (SLURMD_NODENAME is unset)"),
            std::string::npos)
      << st.message();
  SchedulerOptions o = Options();
  o.spare_job = "/nonexistent/spare.sbatch";
  st = CheckSchedulerOptions(o, slurm);
  EXPECT_NE(st.message().find("--spare-job /nonexistent/spare.sbatch: cannot read it"),
            std::string::npos)
      << st.message();
  o.spare_job.clear();
  st = CheckSchedulerOptions(o, slurm);
  EXPECT_NE(st.message().find("--min-spares needs --spare-job FILE"), std::string::npos)
      << st.message();
  SchedulerOptions only_job;
  only_job.spare_job = "x.sbatch";
  st = CheckSchedulerOptions(only_job, slurm);
  EXPECT_NE(st.message().find("--spare-job without --min-spares"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace tenax::launch
