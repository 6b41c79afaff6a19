#include "tenax/launch/agent_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "tenax/protocol/protocol.h"

namespace tenax::launch {
namespace {

bool HasPrefix(const std::string& key, const std::string& prefix) {
  return key.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::vector<std::string> AgentView::OnEvents(const std::vector<etcd::WatchEvent>& events) {
  std::vector<std::string> commits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++changes_;
    for (const etcd::WatchEvent& e : events) {
      const std::string& key = e.kv.key;
      if (key == keys_.generation() && e.type == etcd::WatchEvent::Type::kPut && running_ >= 0 &&
          rdzv::ParseInt(e.kv.value, -1) != running_) {
        moved_ = true;
      } else if (key == keys_.stop()) {
        stopped_ = true;
      } else if (e.type == etcd::WatchEvent::Type::kPut && HasPrefix(key, keys_.commits())) {
        commits.push_back(e.kv.value);
      } else if (e.type == etcd::WatchEvent::Type::kDelete && HasPrefix(key, keys_.agents())) {
        const std::string id = key.substr(keys_.agents().size());
        if (active_.count(id) > 0) lost_.insert(id);
      }
    }
  }
  cv_.notify_all();
  return commits;
}

bool AgentView::LeaseLost(const std::function<void()>& wake) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = !std::exchange(lease_lost_, true);
    ++changes_;
    if (!quit_) wake();
  }
  cv_.notify_all();
  return first;
}

void AgentView::LeaseGranted(int64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  lease_lost_ = false;
  lease_id_ = lease_id;
}

int64_t AgentView::lease_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lease_id_;
}

bool AgentView::lease_lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lease_lost_;
}

bool AgentView::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

bool AgentView::WaitUntil(const std::function<bool()>& done, double timeout_s) {
  const double deadline = protocol::MonotonicNow() + timeout_s;
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = changes_;
    }
    if (done()) return true;
    const double left = deadline - protocol::MonotonicNow();
    if (left <= 0) return false;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(std::min(left, poll_s_)),
                 [&] { return changes_ != seen; });
  }
}

void AgentView::Quit() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
}

bool AgentView::WaitForQuit(double s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(s), [&] { return quit_; });
  return quit_;
}

void AgentView::Begin(int64_t g, const rdzv::Plan& plan, int node_rank) {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = g;
  node_rank_ = node_rank;
  running_plan_ = plan;
  beats_.clear();
  straggler_stop_.reset();
  moved_ = false;
  active_ = std::set<std::string>(plan.nodes.begin(), plan.nodes.end());
  lost_.clear();
}

bool AgentView::StillCurrent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !moved_ && !stopped_ && !lease_lost_ && lost_.empty();
}

std::optional<std::string> AgentView::StopReason(std::vector<protocol::Beat> beats) {
  std::lock_guard<std::mutex> lock(mu_);
  beats_ = std::move(beats);  // for the progress thread
  if (straggler_stop_) return straggler_stop_;
  if (lease_lost_) return std::string("this node lost its etcd lease (fenced)");
  if (stopped_) return std::string("the job stopped");
  if (moved_) return std::string("the generation moved on (another node failed)");
  if (!lost_.empty()) return fmt::format("node(s) lost: {}", fmt::join(lost_, ", "));
  return std::nullopt;
}

AgentView::Ended AgentView::End(bool forget_lost) {
  std::lock_guard<std::mutex> lock(mu_);
  Ended e;
  e.lost = lost_;
  if (forget_lost) lost_.clear();
  e.lease_lost = lease_lost_;
  running_ = -1;
  return e;
}

bool AgentView::TakeLost(std::set<std::string>* lost) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lease_lost_) return false;
  lost->clear();
  lost->swap(lost_);
  return true;
}

std::set<std::string> AgentView::Lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

void AgentView::Forgive(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  lost_.erase(id);
  active_.erase(id);
}

void AgentView::Activate(int node, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.insert(id);
  if (node >= 0 && node < static_cast<int>(running_plan_.nodes.size())) {
    running_plan_.nodes[static_cast<size_t>(node)] = id;
  }
}

void AgentView::SetAgents(std::map<std::string, rdzv::AgentInfo> agents) {
  std::lock_guard<std::mutex> lock(mu_);
  agents_ = std::move(agents);
}

MirrorPlace AgentView::Place() const {
  std::lock_guard<std::mutex> lock(mu_);
  MirrorPlace p;
  p.generation = running_;
  p.node_rank = node_rank_;
  p.plan_nodes = running_plan_.nodes;
  p.agents = agents_;
  return p;
}

AgentView::Running AgentView::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {running_, node_rank_};
}

std::optional<AgentView::ProgressTurn> AgentView::Progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ < 0 || node_rank_ < 0 || lease_lost_ || moved_ || straggler_stop_) {
    return std::nullopt;
  }
  ProgressTurn t;
  t.generation = running_;
  t.node_rank = node_rank_;
  t.lease = lease_id_;
  t.plan = running_plan_;
  t.beats = beats_;
  return t;
}

void AgentView::SetStragglerStop(std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  straggler_stop_ = std::move(reason);
}

}  // namespace tenax::launch
