// A c10d store whose waits also watch for a reason to give up: what live recovery's groups form
// through (parallel/live_group.h), so that a member that died after checking in to an epoch (its
// address never published) costs the others the launcher's decision, not the group's connect
// timeout.
//   Waiting    get(), wait() and multiGet() poll the inner store's check() (1 ms, doubling to
//              50 ms); between polls they ask `give_up`, and a reason it returns ends the wait
//              with c10::DistStoreError naming the keys and the reason; past the timeout they
//              throw as the inner store would.
//   The rest   set, add, compareSet, deleteKey... go to the inner store unchanged.
// Thread safety: as the inner store's, provided `give_up` may be called from any thread.
// Non-goals: watchKey and the queue API (Gloo and NCCL need neither).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace tenax::parallel {

// Asked while waiting for a peer's key: a reason to stop waiting (nullopt: go on).
using GiveUpFn = std::function<std::optional<std::string>()>;

class WatchedStore final : public c10d::Store {
 public:
  WatchedStore(c10::intrusive_ptr<c10d::Store> inner, GiveUpFn give_up);

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  const std::chrono::milliseconds& getTimeout() const noexcept override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::vector<uint8_t>>& values) override;
  void append(const std::string& key, const std::vector<uint8_t>& value) override;
  bool hasExtendedApi() const override;

 private:
  // Constant after construction.
  const c10::intrusive_ptr<c10d::Store> inner_;
  const GiveUpFn give_up_;
};

}  // namespace tenax::parallel
