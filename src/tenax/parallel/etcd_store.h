// A c10d store kept in etcd: what the groups of live recovery form through when their members
// are on several nodes (issue 34). The job's TCP store lives in rank 0's process and a FileStore
// in one node's folder; etcd is the one service every node already reaches and that outlives any
// rank, and only holders of the job's etcd credentials can write into it, so only they can enter
// a group formed through it.
//   Keys       every key is `prefix + key`; values are the bytes given (etcd carries any bytes).
//              add() keeps its counter as decimal text, as c10d's own stores do.
//   Waiting    get() and wait() poll etcd (1 ms, doubling to 50 ms) until every key exists or the
//              timeout passed; then they throw c10::DistStoreError naming the keys.
//   Failures   etcd is briefly unavailable while its members elect a leader (one lost or
//              stalled): a call that fails so is repeated (50 ms, doubling to 1 s) until etcd
//              answers or the store's timeout has passed (wait's own timeout for its polls; 60 s
//              for a store without one), each repeat counted (retried()). A write whose outcome
//              is unknown (sent, unanswered) is repeated too where applying it twice is harmless
//              (set, compareSet, deleteKey), but not add's (it would add twice); between repeats
//              `give_up` is asked, as WatchedStore asks it between polls, and a reason ends them.
//              What still fails throws c10::DistStoreError with etcd's message: to c10d it is a
//              store that cannot be reached.
// Thread safety: every method may be called from any thread (EtcdClient is safe so).
// Non-goals: watchKey and the queue API (c10d's optional extensions; Gloo and NCCL need neither);
// removing its keys when done (the caller deletes its prefix: LiveGroup deletes an epoch's keys
// once the next one formed).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "tenax/etcd/client.h"
#include "tenax/parallel/watched_store.h"

namespace tenax::parallel {

class EtcdStore final : public c10d::Store {
 public:
  // Throws c10::DistStoreError when EtcdClient::Create refuses the options (a TLS file missing).
  EtcdStore(etcd::EtcdOptions options, std::string prefix, std::chrono::milliseconds timeout,
            GiveUpFn give_up = {});

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  // c10d's contract: sets `desired` when the key holds `expected`, or is absent and `expected` is
  // empty; returns the value the key holds afterwards (`expected` for an absent key otherwise).
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

  const std::string& prefix() const { return prefix_; }
  // How many calls were repeated because etcd was unavailable (this store and its clones).
  int64_t retried() const;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kUnboundedRetry{60000};
  Clock::time_point Deadline(std::chrono::milliseconds timeout) const;
  // Whether a write whose outcome is unknown may be sent again (applying it twice is harmless).
  enum class Repeat { kAlways, kOnlyIfNotApplied };
  // `call()` (a Result) until it is not Unavailable or `deadline` is near.
  template <typename F>
  auto Retry(const std::string& what, F call, Clock::time_point deadline,
             Repeat repeat = Repeat::kAlways) -> decltype(call());
  std::optional<etcd::KeyValue> Read(const std::string& key, const std::string& what,
                                     Clock::time_point deadline);

  // Constant after construction.
  const std::string prefix_;
  std::shared_ptr<etcd::EtcdClient> client_;       // shared with clones
  std::shared_ptr<std::atomic<int64_t>> retried_;  // shared with clones
  GiveUpFn give_up_;
};

}  // namespace tenax::parallel
