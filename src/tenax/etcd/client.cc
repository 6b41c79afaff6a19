// The etcd client's key-value, transaction and lease calls (see client.h).
#include "tenax/etcd/client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <utility>

#include "tenax/etcd/internal.h"

namespace tenax::etcd {

using json = nlohmann::json;
using std::chrono::milliseconds;
using namespace internal;  // NOLINT: this file implements on top of the internals

namespace {

json RangeRequest(const std::string& key, bool prefix) {
  json r = {{"key", Base64Encode(key)}};
  if (prefix) r["range_end"] = Base64Encode(PrefixEnd(key));
  return r;
}

json PutRequest(const std::string& key, const std::string& value, int64_t lease) {
  json r = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) r["lease"] = std::to_string(lease);
  return r;
}

json CompareJson(const Compare& c) {
  static const char* const kOps[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  json j = {{"key", Base64Encode(c.key)}, {"result", kOps[static_cast<int>(c.op)]}};
  switch (c.target) {
    case Compare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = Base64Encode(c.value);
      break;
    case Compare::Target::kVersion:
      j["target"] = "VERSION";
      j["version"] = std::to_string(c.number);
      break;
    case Compare::Target::kCreateRevision:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kModRevision:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kLease:
      j["target"] = "LEASE";
      j["lease"] = std::to_string(c.number);
      break;
  }
  return j;
}

json OpJson(const TxnOp& op) {
  switch (op.kind) {
    case TxnOp::Kind::kPut:
      return {{"request_put", PutRequest(op.key, op.value, op.lease)}};
    case TxnOp::Kind::kDelete:
      return {{"request_delete_range", RangeRequest(op.key, op.prefix)}};
    case TxnOp::Kind::kGet:
      break;
  }
  return {{"request_range", RangeRequest(op.key, op.prefix)}};
}

Result<TxnResponse> ParseTxn(const json& j, const Txn& txn) {
  TxnResponse r;
  TENAX_ASSIGN_OR_RETURN(r.revision, HeaderRevision(j));
  r.succeeded = BoolField(j, "succeeded");
  const auto& ops = r.succeeded ? txn.success : txn.failure;
  const auto it = j.find("responses");
  const size_t n = it != j.end() && it->is_array() ? it->size() : 0;
  if (n != ops.size()) return Malformed("transaction response", j);
  for (size_t i = 0; i < n; ++i) {
    if (ops[i].kind != TxnOp::Kind::kGet) continue;
    const auto range = (*it)[i].find("response_range");
    if (range == (*it)[i].end()) return Malformed("transaction response", j);
    // Ranges inside a transaction carry the revision in their own header.
    TENAX_ASSIGN_OR_RETURN(auto rr, ParseRange(*range));
    r.gets.push_back(std::move(rr));
  }
  return r;
}

}  // namespace

// --- public helpers --------------------------------------------------------------------------

Result<std::vector<std::string>> ParseEtcdUrl(const std::string& url) {
  const std::string scheme = "etcd://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    return InvalidArgument("--rdzv " + url +
                           ": expected etcd://HOST:PORT[,HOST:PORT...] (e.g. "
                           "etcd://10.0.0.1:2379,10.0.0.2:2379)");
  }
  std::vector<std::string> endpoints;
  size_t start = scheme.size();
  while (true) {
    const size_t comma = url.find(',', start);
    std::string endpoint = url.substr(start, comma == std::string::npos ? comma : comma - start);
    std::string host;
    int port = 0;
    if (!SplitEndpoint(endpoint, &host, &port)) {
      return InvalidArgument("--rdzv " + url + ": '" + endpoint +
                             "' is not HOST:PORT (a name or IPv4 address, a port 1-65535)");
    }
    endpoints.push_back(std::move(endpoint));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return endpoints;
}

Compare Compare::Value(std::string key, CompareOp op, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.op = op;
  c.value = std::move(value);
  return c;
}
static Compare NumberCompare(std::string key, Compare::Target t, CompareOp op, int64_t n) {
  Compare c;
  c.key = std::move(key);
  c.target = t;
  c.op = op;
  c.number = n;
  return c;
}
Compare Compare::Version(std::string key, CompareOp op, int64_t version) {
  return NumberCompare(std::move(key), Target::kVersion, op, version);
}
Compare Compare::CreateRevision(std::string key, CompareOp op, int64_t revision) {
  return NumberCompare(std::move(key), Target::kCreateRevision, op, revision);
}
Compare Compare::ModRevision(std::string key, CompareOp op, int64_t revision) {
  return NumberCompare(std::move(key), Target::kModRevision, op, revision);
}
Compare Compare::Lease(std::string key, CompareOp op, int64_t lease) {
  return NumberCompare(std::move(key), Target::kLease, op, lease);
}

static TxnOp MakeOp(TxnOp::Kind kind, std::string key, bool prefix) {
  TxnOp op;
  op.kind = kind;
  op.key = std::move(key);
  op.prefix = prefix;
  return op;
}
TxnOp TxnOp::Put(std::string key, std::string value, int64_t lease) {
  TxnOp op = MakeOp(Kind::kPut, std::move(key), false);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}
TxnOp TxnOp::Delete(std::string key) { return MakeOp(Kind::kDelete, std::move(key), false); }
TxnOp TxnOp::DeletePrefix(std::string prefix) {
  return MakeOp(Kind::kDelete, std::move(prefix), true);
}
TxnOp TxnOp::Get(std::string key) { return MakeOp(Kind::kGet, std::move(key), false); }
TxnOp TxnOp::GetPrefix(std::string prefix) { return MakeOp(Kind::kGet, std::move(prefix), true); }

bool OutcomeUnknown(const Status& st) {
  return st.code() == StatusCode::kUnavailable &&
         st.message().find(kOutcomeUnknown) != std::string::npos;
}

bool EtcdClientAvailable() {
#ifdef TENAX_WITH_HTTPLIB
  return true;
#else
  return false;
#endif
}

struct EtcdClient::Impl {
  std::atomic<size_t> preferred{0};  // the endpoint that answered last
};

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (!EtcdClientAvailable()) return InvalidArgument(kNoHttplib);
  if (options.endpoints.empty()) return InvalidArgument("etcd client: no endpoints given");
  for (const auto& e : options.endpoints) {
    std::string host;
    int port = 0;
    if (!SplitEndpoint(e, &host, &port)) {
      return InvalidArgument("etcd endpoint '" + e + "' is not HOST:PORT");
    }
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return InvalidArgument(
        "a client certificate (--rdzv-cert) needs its key (--rdzv-key) and the other way round");
  }
  const std::pair<const char*, const std::string*> files[] = {{"--rdzv-ca", &options.ca_file},
                                                              {"--rdzv-cert", &options.cert_file},
                                                              {"--rdzv-key", &options.key_file}};
  for (const auto& [flag, path] : files) {
    if (!path->empty() && ::access(path->c_str(), R_OK) != 0) {
      return InvalidArgument(fmt::format("{} {}: no such readable file", flag, *path));
    }
  }
  if (options.attempt_timeout < milliseconds(1)) {
    return InvalidArgument("etcd client: attempt_timeout must be positive");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/kv/put",
                                          PutRequest(key, value, lease), CallKind::kWrite));
  return HeaderRevision(reply);
}

Result<std::optional<KeyValue>> EtcdClient::Get(const std::string& key) {
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/kv/range",
                                          RangeRequest(key, false), CallKind::kRead));
  TENAX_ASSIGN_OR_RETURN(auto range, ParseRange(reply));
  if (range.kvs.empty()) return std::optional<KeyValue>();
  return std::optional<KeyValue>(std::move(range.kvs.front()));
}

Result<RangeResponse> EtcdClient::GetPrefix(const std::string& prefix) {
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/kv/range",
                                          RangeRequest(prefix, true), CallKind::kRead));
  return ParseRange(reply);
}

static Result<int64_t> Deleted(const json& reply) {
  int64_t deleted = 0;
  if (!Int64Field(reply, "deleted", &deleted)) return Malformed("delete response", reply);
  return deleted;
}

Result<int64_t> EtcdClient::Delete(const std::string& key) {
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/kv/deleterange",
                                          RangeRequest(key, false), CallKind::kWrite));
  return Deleted(reply);
}

Result<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) {
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/kv/deleterange",
                                          RangeRequest(prefix, true), CallKind::kWrite));
  return Deleted(reply);
}

Result<TxnResponse> EtcdClient::Commit(const Txn& txn) {
  json body = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : txn.compare) body["compare"].push_back(CompareJson(c));
  for (const auto& op : txn.success) body["success"].push_back(OpJson(op));
  for (const auto& op : txn.failure) body["failure"].push_back(OpJson(op));
  // A transaction of reads only is idempotent.
  bool writes = false;
  for (const auto* ops : {&txn.success, &txn.failure}) {
    for (const auto& op : *ops) writes |= op.kind != TxnOp::Kind::kGet;
  }
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/kv/txn", body,
                                          writes ? CallKind::kWrite : CallKind::kRead));
  return ParseTxn(reply, txn);
}

Result<bool> EtcdClient::PutIfAbsent(const std::string& key, const std::string& value,
                                     int64_t lease) {
  Txn txn;
  txn.compare.push_back(Compare::CreateRevision(key, CompareOp::kEqual, 0));
  txn.success.push_back(TxnOp::Put(key, value, lease));
  TENAX_ASSIGN_OR_RETURN(auto r, Commit(txn));
  return r.succeeded;
}

Result<bool> EtcdClient::CompareAndSwap(const std::string& key, const std::string& expected,
                                        const std::string& value, int64_t lease) {
  Txn txn;
  txn.compare.push_back(Compare::Value(key, CompareOp::kEqual, expected));
  txn.success.push_back(TxnOp::Put(key, value, lease));
  TENAX_ASSIGN_OR_RETURN(auto r, Commit(txn));
  return r.succeeded;
}

Result<EtcdLease> EtcdClient::GrantLease(std::chrono::seconds ttl) {
  if (ttl.count() < 1) return InvalidArgument("an etcd lease needs a TTL of at least 1 s");
  // A grant that is repeated after a lost answer only leaves an unused lease, which expires.
  TENAX_ASSIGN_OR_RETURN(auto reply,
                         Call(options_, impl_->preferred, "/v3/lease/grant",
                              json{{"TTL", std::to_string(ttl.count())}}, CallKind::kRead));
  int64_t id = 0, granted = 0;
  if (!Int64Field(reply, "ID", &id) || id == 0 || !Int64Field(reply, "TTL", &granted) ||
      granted < 1) {
    return Malformed("lease grant response", reply);
  }
  return EtcdLease{id, std::chrono::seconds(granted)};
}

Result<int64_t> EtcdClient::KeepAliveOnce(int64_t lease) {
  TENAX_ASSIGN_OR_RETURN(auto reply, Call(options_, impl_->preferred, "/v3/lease/keepalive",
                                          json{{"ID", std::to_string(lease)}}, CallKind::kRead));
  // The keep-alive stream answers {"result": {..., "TTL": t}}; TTL absent (0) means the lease
  // is gone.
  const auto it = reply.find("result");
  int64_t ttl = 0;
  if (it == reply.end() || !it->is_object() || !Int64Field(*it, "TTL", &ttl)) {
    return Malformed("lease keep-alive response", reply);
  }
  if (ttl <= 0) return NotFound(fmt::format("etcd lease {:x} expired or was revoked", lease));
  return ttl;
}

Status EtcdClient::RevokeLease(int64_t lease) {
  auto reply = Call(options_, impl_->preferred, "/v3/lease/revoke",
                    json{{"ID", std::to_string(lease)}}, CallKind::kWrite);
  return reply.status();
}

Status EtcdClient::Compact(int64_t revision) {
  auto reply =
      Call(options_, impl_->preferred, "/v3/kv/compaction",
           json{{"revision", std::to_string(revision)}, {"physical", true}}, CallKind::kWrite);
  return reply.status();
}

}  // namespace tenax::etcd
