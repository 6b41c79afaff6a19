#include "slurm_cluster.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tenax/core/net.h"

namespace tenax::testing {
namespace {

bool Installed(const std::string& program) {
  for (const char* dir : {"/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"}) {
    if (::access((dir + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string ShortHostName() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string h = name;
  return h.substr(0, h.find('.'));
}

// The value of `field` in one line of `scontrol show ... -o` (Key=Value pairs; Reason's value may
// hold spaces and runs to the next " Key=").
std::string Field(const std::string& line, const std::string& field) {
  const std::string key = " " + field + "=";
  size_t at = (" " + line).find(key);
  if (at == std::string::npos) return "";
  at += key.size() - 1;  // in `line`
  size_t end = at;
  for (;;) {
    end = line.find(' ', end);
    if (end == std::string::npos) break;
    const size_t eq = line.find('=', end + 1);
    const size_t space = line.find(' ', end + 1);
    if (eq != std::string::npos && (space == std::string::npos || eq < space)) break;
    ++end;
  }
  std::string v = line.substr(at, end == std::string::npos ? std::string::npos : end - at);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

}  // namespace

Result<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(const NetnsHosts& net,
                                                          const std::string& dir) {
  for (const char* p : {"slurmctld", "slurmd", "sbatch", "scontrol", "munged"}) {
    if (!Installed(p)) {
      return Unavailable(std::string(p) +
                         " is not installed (scripts/setup installs slurmctld, slurmd, "
                         "slurm-client and munge)");
    }
  }
  std::unique_ptr<SlurmCluster> c(new SlurmCluster());
  c->dir_ = dir;
  c->conf_ = dir + "/slurm.conf";
  const std::string munge = dir + "/munge";
  std::filesystem::create_directories(munge);
  std::filesystem::create_directories(dir + "/state");
  std::filesystem::create_directories(dir + "/log");
  for (int h = 0; h < net.size(); ++h)
    std::filesystem::create_directories(dir + "/spool/n" + std::to_string(h));
  auto key = Run("dd if=/dev/urandom bs=1024 count=1 of=" + munge +
                 "/key 2>/dev/null && chmod 600 " + munge + "/key");
  if (key.exit_code != 0) return Unavailable("cannot make a munge key: " + key.output);
  c->munged_ = std::make_unique<Background>(
      Background::Program{},
      std::vector<std::string>{"munged", "-F", "--force", "--key-file=" + munge + "/key",
                               "--socket=" + munge + "/sock", "--pid-file=" + munge + "/pid",
                               "--seed-file=" + munge + "/seed", "--log-file=" + munge + "/log"},
      dir, dir + "/log/munged.out");
  if (!WaitFor([&] { return std::filesystem::exists(munge + "/sock"); }, 30)) {
    return Unavailable("munged did not start: " + c->munged_->output());
  }

  const int ctl_port = FreeTcpPort(net.bridge_address());
  std::string conf =
      "ClusterName=tenaxtest\n"
      "SlurmctldHost=" +
      ShortHostName() + "(" + net.bridge_address() +
      ")\n"
      "SlurmctldPort=" +
      std::to_string(ctl_port) +
      "\n"
      "SlurmdPort=" +
      std::to_string(ctl_port + 1) +
      "\n"
      "SlurmUser=root\nSlurmdUser=root\n"
      "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" +
      munge +
      "/sock\n"
      "StateSaveLocation=" +
      dir +
      "/state\n"
      "SlurmdSpoolDir=" +
      dir +
      "/spool/%n\n"
      "SlurmctldPidFile=" +
      dir +
      "/slurmctld.pid\n"
      "SlurmdPidFile=" +
      dir +
      "/spool/slurmd-%n.pid\n"
      "SlurmctldLogFile=" +
      dir +
      "/log/slurmctld.log\n"
      "SlurmdLogFile=" +
      dir +
      "/log/slurmd-%n.log\n"
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
      "SchedulerType=sched/backfill\nMpiDefault=none\nSwitchType=switch/none\n"
      "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
      "SlurmdParameters=config_overrides\nReturnToService=2\nSlurmdTimeout=300\n"
      "InactiveLimit=0\nKillWait=5\nMinJobAge=3600\nMailProg=/bin/true\n";
  for (int h = 0; h < net.size(); ++h) {
    conf += "NodeName=" + NodeName(h) + " NodeAddr=" + net.address(h) + " CPUs=2 State=UNKNOWN\n";
  }
  conf += "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  WriteFile(c->conf_, conf);
  // slurmd sets up a cgroup plugin even with proctrack/linuxproc; name the hierarchy this
  // machine mounts (unified v2, or v1 controllers under a tmpfs).
  const bool v2 = std::filesystem::exists("/sys/fs/cgroup/cgroup.controllers");
  WriteFile(dir + "/cgroup.conf",
            v2 ? "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n" : "CgroupPlugin=cgroup/v1\n");

  c->slurmctld_ = std::make_unique<Background>(
      Background::Program{}, std::vector<std::string>{"slurmctld", "-D", "-i", "-f", c->conf_}, dir,
      dir + "/log/slurmctld.out");
  for (int h = 0; h < net.size(); ++h) {
    c->slurmds_.push_back(std::make_unique<Background>(
        Background::Program{},
        std::vector<std::string>{"ip", "netns", "exec", net.name(h), "slurmd", "-D", "-f", c->conf_,
                                 "-N", NodeName(h)},
        dir, dir + "/log/slurmd-" + NodeName(h) + ".out"));
  }
  const bool up = WaitFor(
      [&] {
        auto r = c->Client("sinfo -h -N -o '%N %T'");
        if (r.exit_code != 0) return false;
        int idle = 0;
        size_t at = 0;
        while ((at = r.output.find(" idle", at)) != std::string::npos) ++idle, ++at;
        return idle == net.size();
      },
      60);
  if (!up) return Unavailable("the Slurm nodes did not come up:\n" + c->Logs());
  return c;
}

SlurmCluster::~SlurmCluster() {
  slurmds_.clear();
  slurmctld_.reset();
  munged_.reset();
}

CommandResult SlurmCluster::Client(const std::string& command) const {
  return Run(Env() + command, dir_);
}

Result<std::string> SlurmCluster::Sbatch(const std::string& script, const std::string& exports,
                                         const std::string& cwd) const {
  auto r = Run(Env() + exports + " sbatch --parsable " + script, cwd);
  if (r.exit_code != 0) return Unavailable("sbatch failed: " + r.output);
  std::string id = r.output.substr(0, r.output.find_first_of(";\n"));
  return id;
}

std::string SlurmCluster::JobField(const std::string& job, const std::string& field) const {
  return Field(Client("scontrol show job " + job + " -o").output, field);
}

std::string SlurmCluster::NodeField(const std::string& node, const std::string& field) const {
  return Field(Client("scontrol show node " + node + " -o").output, field);
}

std::string SlurmCluster::WaitJobEnd(const std::string& job, double timeout_s) const {
  std::string state;
  const bool ended = WaitFor(
      [&] {
        state = JobField(job, "JobState");
        return !state.empty() && state != "PENDING" && state != "RUNNING" &&
               state != "CONFIGURING" && state != "COMPLETING";
      },
      timeout_s);
  return ended ? state : "";
}

std::string SlurmCluster::Logs() const {
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/log")) {
    if (e.path().filename() == "munged.out") continue;  // one line per credential check
    std::string text = ReadFile(e.path());
    if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
    out += "--- " + e.path().filename().string() + "\n" + text;
  }
  return out;
}

}  // namespace tenax::testing
