#include "tenax/parallel/etcd_store.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

#include "tenax/core/log.h"

namespace tenax::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::string Text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
std::vector<uint8_t> Bytes(const std::string& text) { return {text.begin(), text.end()}; }

[[noreturn]] void Fail(const std::string& what, const Status& why) {
  C10_THROW_ERROR(DistStoreError, fmt::format("etcd store: {}: {}", what, why.message()));
}

template <typename T>
T Take(Result<T> r, const std::string& what) {
  if (!r.ok()) Fail(what, r.status());
  return std::move(*r);
}

}  // namespace

Clock::time_point EtcdStore::Deadline(std::chrono::milliseconds timeout) const {
  return Clock::now() + (timeout == kNoTimeout ? kUnboundedRetry : timeout);
}

template <typename F>
auto EtcdStore::Retry(const std::string& what, F call, Clock::time_point deadline, Repeat repeat)
    -> decltype(call()) {
  auto pause = std::chrono::milliseconds(50);
  for (bool first = true;; first = false) {
    auto r = call();
    if (r.ok() || r.status().code() != StatusCode::kUnavailable) return r;
    if (repeat == Repeat::kOnlyIfNotApplied && etcd::OutcomeUnknown(r.status())) {
      return r;
    }
    if (Clock::now() + pause > deadline) return r;
    if (std::optional<std::string> why = give_up_ ? give_up_() : std::nullopt) {
      Fail(what, Unavailable(
                     fmt::format("stopped waiting for etcd ({}): {}", r.status().message(), *why)));
    }
    retried_->fetch_add(1);
    if (first) {
      log::Warn("etcd store: {} under {}: etcd is unavailable ({}); retrying until it answers",
                what, prefix_, r.status().message());
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

EtcdStore::EtcdStore(etcd::EtcdOptions options, std::string prefix,
                     std::chrono::milliseconds timeout, GiveUpFn give_up)
    : c10d::Store(timeout),
      prefix_(std::move(prefix)),
      retried_(std::make_shared<std::atomic<int64_t>>(0)),
      give_up_(std::move(give_up)) {
  client_ = Take(etcd::EtcdClient::Create(std::move(options)), "cannot use the etcd endpoints");
}

c10::intrusive_ptr<c10d::Store> EtcdStore::clone() {
  auto copy = c10::make_intrusive<EtcdStore>(*this);
  return copy;
}

void EtcdStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  // A put repeated after an unknown outcome writes the same value again.
  Take(Retry(
           "set " + key, [&] { return client_->Put(prefix_ + key, Text(value)); },
           Deadline(timeout_)),
       "set " + key);
}

std::vector<uint8_t> EtcdStore::compareSet(const std::string& key,
                                           const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  const std::string k = prefix_ + key;
  etcd::Txn txn;
  txn.compare.push_back(expected.empty()
                            ? etcd::Compare::Version(k, etcd::CompareOp::kEqual, 0)
                            : etcd::Compare::Value(k, etcd::CompareOp::kEqual, Text(expected)));
  txn.success.push_back(etcd::TxnOp::Put(k, Text(desired)));
  txn.failure.push_back(etcd::TxnOp::Get(k));
  // Repeated after an unknown outcome that applied, the compare fails and reads back `desired`:
  // the same answer.
  const etcd::TxnResponse r =
      Take(Retry(
               "compareSet " + key, [&] { return client_->Commit(txn); }, Deadline(timeout_)),
           "compareSet " + key);
  if (r.succeeded) return desired;
  if (r.gets.empty() || r.gets[0].kvs.empty()) return expected;  // absent, `expected` not empty
  return Bytes(r.gets[0].kvs[0].value);
}

std::vector<uint8_t> EtcdStore::get(const std::string& key) {
  wait({key});
  std::optional<etcd::KeyValue> kv = Read(key, "get " + key, Deadline(timeout_));
  // Only deleteKey removes a key; c10d's callers never delete one they wait for.
  if (!kv) Fail("get " + key, NotFound("the key was deleted after it appeared"));
  return Bytes(kv->value);
}

int64_t EtcdStore::add(const std::string& key, int64_t value) {
  const std::string k = prefix_ + key;
  // Read, then write the sum only if nobody wrote meanwhile (its mod revision unchanged);
  // a concurrent add makes one of the two read again.
  while (true) {
    std::optional<etcd::KeyValue> kv = Read(key, "add " + key, Deadline(timeout_));
    int64_t now = 0;
    if (kv) {
      try {
        now = std::stoll(kv->value);
      } catch (const std::exception&) {
        Fail("add " + key, DataError("the key holds \"" + kv->value + "\", not a number"));
      }
    }
    const int64_t sum = now + value;
    etcd::Txn txn;
    txn.compare.push_back(
        kv ? etcd::Compare::ModRevision(k, etcd::CompareOp::kEqual, kv->mod_revision)
           : etcd::Compare::Version(k, etcd::CompareOp::kEqual, 0));
    txn.success.push_back(etcd::TxnOp::Put(k, std::to_string(sum)));
    // Not repeated once sent: applied twice, it would add twice.
    if (Take(Retry(
                 "add " + key, [&] { return client_->Commit(txn); }, Deadline(timeout_),
                 Repeat::kOnlyIfNotApplied),
             "add " + key)
            .succeeded) {
      return sum;
    }
  }
}

bool EtcdStore::deleteKey(const std::string& key) {
  // Repeated after an unknown outcome that applied, it finds nothing and says false.
  return Take(Retry(
                  "deleteKey " + key, [&] { return client_->Delete(prefix_ + key); },
                  Deadline(timeout_)),
              "deleteKey " + key) > 0;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (!Read(key, "check " + key, Deadline(timeout_))) return false;
  }
  return true;
}

int64_t EtcdStore::getNumKeys() {
  return static_cast<int64_t>(
      Take(Retry(
               "getNumKeys", [&] { return client_->GetPrefix(prefix_); }, Deadline(timeout_)),
           "getNumKeys")
          .kvs.size());
}

void EtcdStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void EtcdStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const auto t0 = Clock::now();
  const Clock::time_point deadline = Deadline(timeout);
  auto pause = std::chrono::milliseconds(1);
  // Keys already seen stay seen (none is deleted while waited for): each poll asks for the rest.
  std::vector<std::string> left = keys;
  while (true) {
    left.erase(std::remove_if(left.begin(), left.end(),
                              [&](const std::string& key) {
                                return Read(key, "wait for " + key, deadline).has_value();
                              }),
               left.end());
    if (left.empty()) return;
    if (timeout != kNoTimeout && Clock::now() - t0 > timeout) {
      C10_THROW_ERROR(DistStoreError,
                      fmt::format("etcd store: timed out after {} ms waiting for {} under {}",
                                  timeout.count(), fmt::join(left, ", "), prefix_));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::optional<etcd::KeyValue> EtcdStore::Read(const std::string& key, const std::string& what,
                                              Clock::time_point deadline) {
  return Take(Retry(
                  what, [&] { return client_->Get(prefix_ + key); }, deadline),
              what);
}

int64_t EtcdStore::retried() const { return retried_->load(); }

}  // namespace tenax::parallel
