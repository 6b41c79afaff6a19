// Internals of the etcd client (client.h), shared by its .cc files and its tests; not an API
// for other code. The gateway's encoding (base64 bytes, int64 as strings, zero fields omitted),
// the parsing of its answers, and the HTTP transport with its failover rule.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/sigpipe.h"
#include "tenax/core/status.h"
#include "tenax/etcd/client.h"

#ifdef TENAX_WITH_HTTPLIB
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#endif

namespace tenax::etcd::internal {

// --- encoding (codec.cc) ----------------------------------------------------------------

// The gateway carries keys and values (protobuf `bytes`) as standard base64.
std::string Base64Encode(const std::string& in);
// Accepts padded or unpadded standard base64; nullopt on anything else.
std::optional<std::string> Base64Decode(const std::string& in);
// The end of the key range holding exactly the keys that start with `prefix`: the prefix with its
// last byte incremented (trailing 0xff bytes dropped first); "\0" (every key) for an empty or
// all-0xff prefix, as etcd defines it.
std::string PrefixEnd(const std::string& prefix);

// Field readers: the gateway writes int64 as JSON strings and omits fields that are zero (absent
// reads as 0 / "" / false). False when the field is there but malformed.
bool Int64Field(const nlohmann::json& j, const char* name, int64_t* out);
bool BytesField(const nlohmann::json& j, const char* name, std::string* out);
bool BoolField(const nlohmann::json& j, const char* name);

Status Malformed(const std::string& what, const nlohmann::json& j);
Result<KeyValue> ParseKeyValue(const nlohmann::json& j);
Result<int64_t> HeaderRevision(const nlohmann::json& j);
Result<RangeResponse> ParseRange(const nlohmann::json& j);

// Splits "HOST:PORT"; false on a missing host, a second ':' (IPv6 literals are a non-goal) or a
// port outside 1..65535.
bool SplitEndpoint(const std::string& endpoint, std::string* host, int* port);

// --- transport (transport.cc) -----------------------------------------------------------

extern const char kNoHttplib[];

enum class CallKind {
  kRead,   // idempotent: any endpoint may answer, retried on any transport error
  kWrite,  // may have been applied once sent: retried only when it provably was not
};

// Sends `body` to `path` at one endpoint after another, starting with `preferred` (updated to
// the one that answers), until one answers; see client.h for which failures move on.
Result<nlohmann::json> Call(const EtcdOptions& o, std::atomic<size_t>& preferred,
                            const std::string& path, const nlohmann::json& body, CallKind kind);

Status NoEndpointAnswered(const std::vector<std::string>& errors);

#ifdef TENAX_WITH_HTTPLIB

// A fresh HTTP(S) client for one endpoint, no keep-alive; connects and writes bounded by the
// options' attempt_timeout, each read by `io_timeout` (a watch passes its idle time). Fails only
// when the client certificate or key cannot be loaded.
Result<std::unique_ptr<httplib::ClientImpl>> MakeHttp(const EtcdOptions& o,
                                                      const std::string& endpoint,
                                                      std::chrono::milliseconds io_timeout);
// "endpoint: what failed", with a hint at the flag to check where one applies.
std::string TransportError(const EtcdOptions& o, const std::string& endpoint, httplib::Error e);

#endif  // TENAX_WITH_HTTPLIB

}  // namespace tenax::etcd::internal
