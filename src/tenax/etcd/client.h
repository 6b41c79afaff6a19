// A small etcd v3 client for the node agents of `tenax launch --rdzv etcd://...`: key-value
// reads and writes with revisions, transactions (compare-and-swap, create-if-absent), leases and
// watches. It speaks etcd's v3 JSON gateway (gRPC-gateway, HTTP/1.1, keys and values base64) with
// Debian's cpp-httplib, optionally over TLS with a client certificate (etcd's
// --client-cert-auth). Debian 12's etcd 3.4 serves the gateway under /v3/ (and the deprecated
// /v3beta/; not /v3alpha/); we use /v3/.
//
// Why the JSON gateway and not gRPC: everything the agents need (KV, Txn, Lease, Watch) is there;
// the two streaming RPCs work as well: a keep-alive is one request per POST, a watch is a long
// POST whose response streams one JSON object per line. gRPC++ would add protobuf code
// generation to the build for no capability the agents use.
//
// Failover and the outcome of a call. A client has several endpoints (members of one etcd
// cluster) and starts each call at the endpoint that answered last. A call that could not reach
// an endpoint (refused, connect timeout, TLS handshake failed, or etcd answered "no leader" /
// "could not reach the server") moves on to the next one; so does a read-only call (Get, and
// keep-alives, which are idempotent) on any transport error. A call that changes state (Put,
// Delete, Txn, lease grant/revoke) and was sent but got no answer is NOT repeated, because it may
// have been applied (a compare-and-swap applied twice reports that it lost): it returns
// Unavailable with "outcome unknown", and the caller reads back the key to learn what happened.
// Every attempt is bounded by EtcdOptions::attempt_timeout (connect, TLS handshake, and each read
// and write), so one call takes at most endpoints x attempt_timeout; resolving a host name is not
// bounded (give addresses where that matters). Each call opens a fresh connection: on loopback
// about 1 ms per call, about 8-12 ms with TLS (the handshake), measured on a busy 2-core machine.
//
// Errors are Status values, never exceptions or aborts: Unavailable when no endpoint answered
// (naming each endpoint and why), NotFound for an unknown lease, InvalidArgument for bad options
// or a request etcd rejects, DataError for an answer that is not what etcd sends.
//
// Non-goals: etcd's user/password auth (tenax authenticates with client certificates), the
// cluster/maintenance API beyond what tests need, IPv6 literals in endpoints, fragmented watch
// responses (a single revision's events fit one response unless a transaction writes more than
// etcd's 1.5 MiB request limit, which tenax's small keys never approach).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::etcd {

// True when this build has the client (Debian's libcpp-httplib-dev was found by CMake). Without
// it every call returns an error saying how to enable it.
bool EtcdClientAvailable();

// Whether a call's error says that a write was sent and may have been applied (Unavailable with
// "outcome unknown", the file comment): a caller may repeat such a write only if applying it
// twice is harmless. Any other Unavailable means that nothing was applied.
bool OutcomeUnknown(const Status& st);
inline constexpr const char* kOutcomeUnknown = "outcome unknown";

struct EtcdOptions {
  // "HOST:PORT" of each member; HOST a name or an IPv4 address.
  std::vector<std::string> endpoints;
  // TLS is on when any of the three is set. `ca_file` verifies the server (empty: the system's
  // CAs); `cert_file` + `key_file` are this client's certificate and key, which an etcd started
  // with --client-cert-auth requires (the agent's --rdzv-ca, --rdzv-cert, --rdzv-key).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // Bounds one attempt at one endpoint: the connect, and each read and each write after it.
  std::chrono::milliseconds attempt_timeout{2000};

  bool tls() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// Parses "etcd://HOST:PORT[,HOST:PORT...]" (the --rdzv flag) into endpoints, rejecting an empty
// list, a missing or bad port, and another scheme, with a message naming the flag.
Result<std::vector<std::string>> ParseEtcdUrl(const std::string& url);

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // revision of the put that created the key
  int64_t mod_revision = 0;     // revision of the last put (or, in a delete event, the delete)
  int64_t version = 0;          // puts since creation, 1 for a new key
  int64_t lease = 0;            // the lease the key is attached to, 0 for none
};

struct RangeResponse {
  std::vector<KeyValue> kvs;  // in key order
  int64_t revision = 0;       // the store's revision when the read was served
};

// A lease as granted: etcd may raise the TTL asked for to its minimum (1.5 election timeouts,
// 2 s with default settings).
struct EtcdLease {
  int64_t id = 0;
  std::chrono::seconds ttl{0};
};

// One comparison of a transaction's guard, e.g. Compare::Version(k, CompareOp::kEqual, 0): "k
// does not exist". A missing key has value "", version, create_revision, mod_revision and lease 0.
enum class CompareOp { kEqual, kNotEqual, kGreater, kLess };
struct Compare {
  enum class Target { kValue, kVersion, kCreateRevision, kModRevision, kLease };
  std::string key;
  Target target = Target::kVersion;
  CompareOp op = CompareOp::kEqual;
  std::string value;   // for kValue
  int64_t number = 0;  // for the others

  static Compare Value(std::string key, CompareOp op, std::string value);
  static Compare Version(std::string key, CompareOp op, int64_t version);
  static Compare CreateRevision(std::string key, CompareOp op, int64_t revision);
  static Compare ModRevision(std::string key, CompareOp op, int64_t revision);
  static Compare Lease(std::string key, CompareOp op, int64_t lease);
};

// One operation of a transaction branch.
struct TxnOp {
  enum class Kind { kPut, kDelete, kGet };
  Kind kind = Kind::kGet;
  std::string key;
  std::string value;    // for kPut
  int64_t lease = 0;    // for kPut: attach the key to this lease (0: none)
  bool prefix = false;  // kDelete / kGet: every key starting with `key`

  static TxnOp Put(std::string key, std::string value, int64_t lease = 0);
  static TxnOp Delete(std::string key);
  static TxnOp DeletePrefix(std::string prefix);
  static TxnOp Get(std::string key);
  static TxnOp GetPrefix(std::string prefix);
};

// If every comparison holds, the `success` operations run, else the `failure` ones; atomically,
// as one revision.
struct Txn {
  std::vector<Compare> compare;
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;
};

struct TxnResponse {
  bool succeeded = false;  // which branch ran
  int64_t revision = 0;    // the store's revision after the transaction
  // One entry per kGet operation of the branch that ran, in order.
  std::vector<RangeResponse> gets;
};

// Thread safety: every method may be called from any number of threads at once. Each call opens
// its own connection (no connection is shared between calls or kept between them: simple, and a
// member that died cannot leave a stale socket behind); the only shared state is the index of the
// endpoint that answered last (atomic). Every method blocks until etcd answers or all endpoints
// failed (at most endpoints x attempt_timeout).
class EtcdClient {
 public:
  // Checks the options (endpoints parse; TLS files exist; a certificate comes with its key) but
  // does not connect: a cluster that is down is reported by the first call.
  static Result<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdOptions& options() const { return options_; }

  // Writes key = value (attached to `lease` unless 0); returns the revision of the write.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // The key, or nullopt when absent. Reads are linearizable (served through the leader), so a
  // member cut off from the others does not answer stale data; it fails and the next one answers.
  Result<std::optional<KeyValue>> Get(const std::string& key);
  // Every key starting with `prefix`, in key order, and the revision they were read at (watch
  // from revision + 1 to see every later change exactly once).
  Result<RangeResponse> GetPrefix(const std::string& prefix);
  // Deletes the key / every key under `prefix`; returns how many were deleted.
  Result<int64_t> Delete(const std::string& key);
  Result<int64_t> DeletePrefix(const std::string& prefix);
  Result<TxnResponse> Commit(const Txn& txn);

  // Creates key = value only if the key does not exist; true if this call created it.
  Result<bool> PutIfAbsent(const std::string& key, const std::string& value, int64_t lease = 0);
  // Sets key = value only if its value is `expected` (an absent key never matches: etcd fails a
  // value comparison on a missing key; use PutIfAbsent); true if this call swapped it. Of several
  // callers racing from the same expected value exactly one wins.
  Result<bool> CompareAndSwap(const std::string& key, const std::string& expected,
                              const std::string& value, int64_t lease = 0);

  // Grants a lease of `ttl` (whole seconds, at least 1).
  Result<EtcdLease> GrantLease(std::chrono::seconds ttl);
  // Refreshes the lease to its full TTL; returns that TTL in seconds. NotFound once it expired
  // or was revoked (its keys are gone then).
  Result<int64_t> KeepAliveOnce(int64_t lease);
  // Ends the lease now and deletes every key attached to it. NotFound if it no longer exists.
  Status RevokeLease(int64_t lease);

  // Compacts history before `revision` (tests use it to provoke a watcher's compaction error).
  Status Compact(int64_t revision);

 private:
  explicit EtcdClient(EtcdOptions options);

  struct Impl;
  const EtcdOptions options_;
  std::unique_ptr<Impl> impl_;
};

// One change seen by a watch.
struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  // For kPut the key's new state; for kDelete the key and mod_revision (the delete's revision).
  KeyValue kv;
};

struct WatchOptions {
  // The watch resumes (from the last delivered revision + 1) on a fresh connection when its
  // stream has carried nothing for this long; this bounds how long a silently dead connection
  // (a member whose host vanished without closing it) can delay events.
  std::chrono::milliseconds idle_reconnect{std::chrono::seconds(10)};
  // Pause between attempts while no endpoint accepts the watch.
  std::chrono::milliseconds retry_interval{std::chrono::milliseconds(200)};
};

// Watches every key under a prefix from a given revision and delivers the changes, in revision
// order and each exactly once, to a callback on a background thread the watcher owns. Chosen over
// a blocking "wait for a change after revision R" call because the agents react to several kinds
// of change (members, generation, failures) as they come, and one long-lived stream per prefix
// costs one connection instead of one per wait; a caller that wants to block can wait on its own
// condition variable that the callback signals.
//
// Lossless resumption: the watcher remembers the revision after the last event it delivered;
// when its stream breaks (a member killed, no leader, idle too long) it opens a new one at another
// endpoint from that revision, so nothing is lost or delivered twice. Watch requests carry etcd's
// "hasleader" requirement, so a member that loses its leader cancels the stream instead of
// going quiet.
//
// Errors go to `on_error` (on the watcher's thread): Unavailable each time no endpoint accepts
// the watch (the watcher keeps retrying every retry_interval until stopped), and DataError once
// when the start revision has been compacted away (events were lost: the watcher stops; read the
// state again and start a new watcher).
//
// Thread safety: callbacks run one at a time on the watcher's thread, never after Stop returns.
// A callback must not destroy or Stop its own watcher (that would join its own thread). Stop and
// the destructor may be called from any other thread; they shut the stream's socket down rather
// than wait for etcd, so they return once a running callback has returned (or, if a connect or TLS
// handshake is under way, once it ends: at most attempt_timeout).
class EtcdWatcher {
 public:
  using EventsFn = std::function<void(const std::vector<WatchEvent>&)>;
  using ErrorFn = std::function<void(const Status&)>;

  // Starts watching keys with `prefix` at `start_revision` (>= 1; usually GetPrefix's revision
  // + 1). Does not wait for etcd: a cluster that is down is reported through `on_error`.
  static Result<std::unique_ptr<EtcdWatcher>> Start(EtcdOptions options, std::string prefix,
                                                    int64_t start_revision, EventsFn on_events,
                                                    ErrorFn on_error, WatchOptions watch = {});
  ~EtcdWatcher();  // Stop()
  EtcdWatcher(const EtcdWatcher&) = delete;
  EtcdWatcher& operator=(const EtcdWatcher&) = delete;

  void Stop();
  // The revision the watcher would resume from: one past the last event delivered (already
  // advanced while the callback for those events runs).
  int64_t next_revision() const { return next_revision_.load(); }

 private:
  EtcdWatcher(EtcdOptions options, std::string prefix, int64_t start_revision, EventsFn on_events,
              ErrorFn on_error, WatchOptions watch);
  void Run();
  // One stream at one endpoint; returns when it ends. Sets *compacted when etcd refused the
  // revision as compacted.
  Status WatchOnce(const std::string& endpoint, bool* compacted);

  // Constant after construction.
  const EtcdOptions options_;
  const std::string prefix_;
  const EventsFn on_events_;
  const ErrorFn on_error_;
  const WatchOptions watch_;

  std::atomic<int64_t> next_revision_;  // written by the watcher thread only
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_: the stream in flight, so Stop can shut its socket down (type-erased to keep
  // cpp-httplib out of this header).
  std::function<void()> cancel_stream_;
  bool done_ = false;  // guarded by mu_: Run returned

  std::thread thread_;  // last: starts after every member above is initialised
};

// Keeps one lease alive from a background thread it owns, and says when it is lost. A keep-alive
// goes out every ttl/3; the lease is lost when etcd says it expired (definitive), or when no
// keep-alive succeeded before the local deadline: the send time of the last successful
// keep-alive plus the TTL. That deadline is never later than etcd's own (etcd starts the TTL
// when the request arrives, after we sent it), so an agent cut off from etcd learns it lost its
// lease no later than etcd does, and can stop its ranks before a spare takes its place (fencing).
//
// Thread safety: all methods may be called from any thread. `on_lost` runs once, on the keeper's
// thread, and must not destroy the keeper. The destructor stops the thread (it waits for at most
// one keep-alive in flight) and does not revoke the lease.
class EtcdLeaseKeeper {
 public:
  using LostFn = std::function<void(const Status&)>;
  // `lease` as GrantLease returned it. The options' attempt_timeout is capped so that a
  // keep-alive that tries every endpoint fits in ttl/3. Sends one keep-alive before returning
  // (its error is Start's), which fixes the first deadline.
  static Result<std::unique_ptr<EtcdLeaseKeeper>> Start(EtcdOptions options, EtcdLease lease,
                                                        LostFn on_lost);
  ~EtcdLeaseKeeper();
  EtcdLeaseKeeper(const EtcdLeaseKeeper&) = delete;
  EtcdLeaseKeeper& operator=(const EtcdLeaseKeeper&) = delete;

  int64_t lease() const { return lease_; }
  // Whether the lease is lost: etcd said so, or the local deadline passed (checked at the time of
  // the call, even while the keeper thread waits on a keep-alive). Sticky: once lost, always lost.
  bool lost() const;
  // Why the lease was lost (OK while it is held).
  Status status() const;
  // The local deadline described above.
  std::chrono::steady_clock::time_point deadline() const;

 private:
  EtcdLeaseKeeper(std::unique_ptr<EtcdClient> client, int64_t lease, std::chrono::seconds ttl,
                  LostFn on_lost);
  void Run();

  // Constant after construction.
  const std::unique_ptr<EtcdClient> client_;
  const int64_t lease_;
  const std::chrono::seconds ttl_;
  const LostFn on_lost_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;    // guarded by mu_
  mutable Status lost_;  // guarded by mu_; OK while held, sticky once set (status() sets it too)
  std::chrono::steady_clock::time_point deadline_;  // guarded by mu_

  std::thread thread_;  // last: starts after every member above is initialised
};

}  // namespace tenax::etcd
