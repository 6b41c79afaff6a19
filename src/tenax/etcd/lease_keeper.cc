// EtcdLeaseKeeper: keeps a lease alive and knows, conservatively, when it is lost (see
// client.h).
#include <fmt/format.h>

#include <algorithm>

#include "tenax/etcd/client.h"

namespace tenax::etcd {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

EtcdLeaseKeeper::EtcdLeaseKeeper(std::unique_ptr<EtcdClient> client, int64_t lease,
                                 std::chrono::seconds ttl, LostFn on_lost)
    : client_(std::move(client)), lease_(lease), ttl_(ttl), on_lost_(std::move(on_lost)) {}

Result<std::unique_ptr<EtcdLeaseKeeper>> EtcdLeaseKeeper::Start(EtcdOptions options,
                                                                EtcdLease lease, LostFn on_lost) {
  if (lease.ttl.count() < 1) {
    return InvalidArgument("EtcdLeaseKeeper: the lease's TTL must be at least 1 s");
  }
  // One keep-alive call (every endpoint tried once) must fit in a third of the TTL, so that a
  // call to a dead endpoint cannot carry the keeper past the deadline unnoticed.
  const auto n = static_cast<int64_t>(std::max<size_t>(1, options.endpoints.size()));
  const milliseconds cap(
      std::max<int64_t>(50, std::chrono::duration_cast<milliseconds>(lease.ttl).count() / (3 * n)));
  options.attempt_timeout = std::min(options.attempt_timeout, cap);
  TENAX_ASSIGN_OR_RETURN(auto client, EtcdClient::Create(std::move(options)));
  // A first keep-alive before the thread starts fixes a deadline no later than etcd's.
  const auto sent = Clock::now();
  TENAX_ASSIGN_OR_RETURN(int64_t granted, client->KeepAliveOnce(lease.id));
  std::unique_ptr<EtcdLeaseKeeper> keeper(
      new EtcdLeaseKeeper(std::move(client), lease.id, lease.ttl, std::move(on_lost)));
  keeper->deadline_ = sent + std::chrono::seconds(granted);
  keeper->thread_ = std::thread([k = keeper.get()] { k->Run(); });
  return keeper;
}

EtcdLeaseKeeper::~EtcdLeaseKeeper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

bool EtcdLeaseKeeper::lost() const { return !status().ok(); }

Status EtcdLeaseKeeper::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  // The keeper thread may be inside a keep-alive call: the deadline alone decides, and once it
  // passed the loss stands even if that call succeeds later (callers may have fenced already).
  if (lost_.ok() && Clock::now() >= deadline_) {
    lost_ = Unavailable(fmt::format(
        "etcd lease {:x}: no keep-alive succeeded within its TTL of {} s; this node must "
        "consider itself cut off",
        lease_, ttl_.count()));
  }
  return lost_;
}

std::chrono::steady_clock::time_point EtcdLeaseKeeper::deadline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deadline_;
}

void EtcdLeaseKeeper::Run() {
  const auto interval = std::chrono::duration_cast<milliseconds>(ttl_) / 3;
  const milliseconds retry = std::max(milliseconds(50), interval / 4);
  auto next = Clock::now() + interval;
  std::string last_error;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, std::min(next, deadline_), [this] { return stop_; });
      if (stop_) return;
      if (Clock::now() >= deadline_) {
        lost_ = Unavailable(fmt::format(
            "etcd lease {:x}: no keep-alive succeeded within its TTL of {} s ({}); this node "
            "must consider itself cut off",
            lease_, ttl_.count(), last_error.empty() ? "no answer" : last_error));
        break;
      }
    }
    const auto sent = Clock::now();
    auto r = client_->KeepAliveOnce(lease_);
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (!lost_.ok()) break;  // status() saw the deadline pass during the call: loss is sticky
    if (r.ok()) {
      deadline_ = std::max(deadline_, sent + std::chrono::seconds(*r));
      next = sent + interval;
      last_error.clear();
    } else if (r.status().code() == StatusCode::kNotFound) {
      lost_ = r.status();
      break;
    } else {
      last_error = r.status().message();
      next = Clock::now() + retry;
    }
  }
  if (on_lost_) on_lost_(status());
}

}  // namespace tenax::etcd
