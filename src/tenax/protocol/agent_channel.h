// The channel from a rank to its node agent (`tenax launch --rdzv etcd://...`), for the one
// thing a rank must ask before doing: committing a checkpoint. On several nodes a rank of an old
// generation (its node was cut off, stopped, or replaced) must never commit, so rank 0 asks its
// agent, which commits the step in etcd only if the rank's generation is still the job's current
// one (a transaction: docs/launcher_protocol.md "Many nodes"), and only then writes COMMITTED.
//
// Transport: a Unix socket in the node's heartbeat folder (RankContext::agent_socket), one JSON
// request line and one JSON answer line per connection:
//   {"op": "commit", "generation": G, "step": S, "manifest": {...}}  ->  {"ok": true} or
//   {"ok": false, "error": "..."}
// Thread safety: the client functions are stateless; the server runs one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tenax/core/status.h"
#include "tenax/core/wake_pipe.h"

namespace tenax::protocol {

// Asks the agent at `socket_path` to commit `step` for `generation` with `manifest`. Unavailable
// when the agent cannot be reached, does not answer within `timeout_s`, or refuses (the
// generation is no longer current, or etcd cannot be reached): the checkpoint is then not
// committed, and the message says which.
Status RequestCommit(const std::string& socket_path, int64_t generation, int64_t step,
                     const nlohmann::json& manifest, double timeout_s);

// The agent's side: serves requests on `socket_path` until destroyed. `on_commit` decides and
// must return quickly enough for the rank's timeout (it is called on the server's thread).
class AgentChannelServer {
 public:
  using CommitFn =
      std::function<Status(int64_t generation, int64_t step, const nlohmann::json& manifest)>;
  static Result<std::unique_ptr<AgentChannelServer>> Start(const std::string& socket_path,
                                                           CommitFn on_commit);
  ~AgentChannelServer();
  AgentChannelServer(const AgentChannelServer&) = delete;
  AgentChannelServer& operator=(const AgentChannelServer&) = delete;

 private:
  AgentChannelServer(int listen_fd, std::string path, CommitFn on_commit);
  void Loop();
  void Serve(int fd);

  // Constant after construction.
  const int listen_fd_;
  const std::string path_;
  const CommitFn on_commit_;
  WakePipe stop_;       // wakes the thread to end it
  std::thread thread_;  // last
};

}  // namespace tenax::protocol
