// The node agent's checkpoint files between nodes (checkpoint_mirror.h does the work): before
// ranks resume, this node's folder holds exactly the job's commits with the newest complete;
// after each commit, this node's files go to the next node's RAM (replicas). Here: what the
// mirror needs from etcd and from the agent's view (taken under its lock).
#include "tenax/launch/node_agent_internal.h"

namespace tenax::launch::agent_internal {

Status NodeAgent::PrepareCheckpoints(int64_t g) {
  if (!mirror_) return Status::Ok();  // the job does not checkpoint
  using Agents = std::map<std::string, rdzv::AgentInfo>;
  return mirror_->Prepare(*etcd_, keys_, g, [&]() -> Result<Agents> {
    TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse agents,
                           Retry([&] { return etcd_->GetPrefix(keys_.agents()); }));
    Agents live = AgentRecords(agents);
    view_.SetAgents(live);
    return live;
  });
}

void NodeAgent::PushReplicas(const std::string& commit_json) {
  if (!mirror_) return;
  mirror_->Push(commit_json, view_.Place());
}

}  // namespace tenax::launch::agent_internal
