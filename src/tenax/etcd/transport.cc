// The etcd client's HTTP transport: one fresh connection per attempt, failover across
// endpoints, and etcd's error answers mapped onto Status (see client.h, "Failover").
#include <fmt/format.h>

#include "tenax/etcd/internal.h"

namespace tenax::etcd::internal {

using json = nlohmann::json;
using std::chrono::milliseconds;

const char kNoHttplib[] =
    "this tenax was built without cpp-httplib, so it cannot talk to etcd: install Debian's "
    "libcpp-httplib-dev (scripts/setup does) and rebuild";

#ifdef TENAX_WITH_HTTPLIB
namespace {

// etcd's gRPC status codes (the gateway's "code") mapped onto tenax's.
Status FromEtcdError(int code, const std::string& message, const std::string& endpoint) {
  const std::string text = "etcd at " + endpoint + ": " + message;
  switch (code) {
    case 3:  // InvalidArgument
    case 9:  // FailedPrecondition
      return InvalidArgument(text);
    case 5:  // NotFound
      return NotFound(text);
    case 11:  // OutOfRange: a compacted revision
      return DataError(text);
    case 7:   // PermissionDenied
    case 16:  // Unauthenticated
      return InvalidArgument(text +
                             " (is this client's certificate, --rdzv-cert, one the etcd "
                             "cluster trusts?)");
    case 4:   // DeadlineExceeded
    case 14:  // Unavailable
      return Unavailable(text);
    default:
      return Internal(text);
  }
}

// An etcd error that guarantees the request was not applied, so that a write may go to the next
// endpoint: the member has no leader (it rejects proposals up front), or the gateway could not
// reach its own gRPC server.
bool NotApplied(const std::string& message) {
  return message.find("no leader") != std::string::npos ||
         message.find("connection error") != std::string::npos ||
         message.find("not capable") != std::string::npos;
}

}  // namespace
#endif  // TENAX_WITH_HTTPLIB

static std::string JoinErrors(const std::vector<std::string>& errors) {
  std::string s;
  for (const auto& e : errors) s += (s.empty() ? "" : "; ") + e;
  return s;
}

Status NoEndpointAnswered(const std::vector<std::string>& errors) {
  return Unavailable("no etcd endpoint answered (" + JoinErrors(errors) +
                     "); check that etcd runs there and that --rdzv names its client URLs");
}

#ifdef TENAX_WITH_HTTPLIB

static void SetTimeout(httplib::ClientImpl& c, milliseconds connect, milliseconds io) {
  c.set_connection_timeout(connect.count() / 1000, (connect.count() % 1000) * 1000);
  c.set_read_timeout(io.count() / 1000, (io.count() % 1000) * 1000);
  c.set_write_timeout(connect.count() / 1000, (connect.count() % 1000) * 1000);
}

Result<std::unique_ptr<httplib::ClientImpl>> MakeHttp(const EtcdOptions& o,
                                                      const std::string& endpoint,
                                                      milliseconds io_timeout) {
  std::string host;
  int port = 0;
  if (!SplitEndpoint(endpoint, &host, &port)) {
    return InvalidArgument("etcd endpoint '" + endpoint + "' is not HOST:PORT");
  }
  std::unique_ptr<httplib::ClientImpl> c;
  if (o.tls()) {
    std::unique_ptr<httplib::SSLClient> ssl;
    if (o.cert_file.empty()) {
      ssl = std::make_unique<httplib::SSLClient>(host, port);
    } else {
      ssl = std::make_unique<httplib::SSLClient>(host, port, o.cert_file, o.key_file);
    }
    if (!ssl->is_valid()) {
      return InvalidArgument("cannot load the etcd client certificate " + o.cert_file +
                             " (--rdzv-cert) with its key " + o.key_file +
                             " (--rdzv-key): are they PEM files that belong together?");
    }
    if (!o.ca_file.empty()) ssl->set_ca_cert_path(o.ca_file);
    ssl->enable_server_certificate_verification(true);
    c = std::move(ssl);
  } else {
    c = std::make_unique<httplib::ClientImpl>(host, port);
  }
  c->set_keep_alive(false);
  // Without it a TLS request waits ~40 ms per call: its records go out in separate segments, and
  // Nagle holds the later ones until etcd's delayed ACK of the first.
  c->set_tcp_nodelay(true);
  SetTimeout(*c, o.attempt_timeout, io_timeout);
  return c;
}

// True when a failed request provably never reached etcd whole (so even a write may go to the
// next endpoint): the connection or TLS handshake failed, or writing the request failed (etcd
// acts on a request only once its whole body arrived).
static bool NotSent(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
    case httplib::Error::ConnectionTimeout:
    case httplib::Error::BindIPAddress:
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification:
    case httplib::Error::Write:
      return true;
    default:
      return false;
  }
}

std::string TransportError(const EtcdOptions& o, const std::string& endpoint, httplib::Error e) {
  std::string s = endpoint + ": " + httplib::to_string(e);
  if (e == httplib::Error::SSLServerVerification) {
    s += " (the server's certificate does not verify against --rdzv-ca " +
         (o.ca_file.empty() ? std::string("(system CAs)") : o.ca_file) +
         ", or does not name this host)";
  } else if (o.tls() && (e == httplib::Error::SSLConnection || e == httplib::Error::Read ||
                         e == httplib::Error::Write)) {
    s += o.cert_file.empty()
             ? " (if etcd runs with --client-cert-auth, pass --rdzv-cert and --rdzv-key)"
             : " (is --rdzv-cert signed by a CA that etcd's --trusted-ca-file trusts?)";
  } else if (!o.tls() && e == httplib::Error::Read) {
    s += " (if etcd serves TLS, pass --rdzv-ca)";
  }
  return s;
}

#endif  // TENAX_WITH_HTTPLIB

Result<json> Call(const EtcdOptions& o, std::atomic<size_t>& preferred, const std::string& path,
                  const json& body, CallKind kind) {
#ifndef TENAX_WITH_HTTPLIB
  return InvalidArgument(kNoHttplib);
#else
  ScopedBlockSigpipe no_sigpipe;
  const std::string text = body.dump();
  const size_t n = o.endpoints.size();
  const size_t first = preferred.load() % n;
  std::vector<std::string> errors;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    const std::string& endpoint = o.endpoints[i];
    TENAX_ASSIGN_OR_RETURN(auto http, MakeHttp(o, endpoint, o.attempt_timeout));
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = {{"Content-Type", "application/json"}};
    req.body = text;
    int status = 0;
    std::string body;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      body.append(data, size);
      return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool answered = http->send(req, res, error);
    json reply = json::parse(body, nullptr, /*allow_exceptions=*/false);
    // etcd's gateway ends every error answer with a chunked trailer (Grpc-Trailer-Content-Type)
    // that cpp-httplib 0.11 cannot parse: it reports a read error after the whole body arrived.
    // A body that parses as one JSON object is complete (a cut-off one cannot parse), so it is
    // etcd's answer whatever the transport said afterwards.
    const bool complete = status != 0 && !reply.is_discarded() && reply.is_object();
    if (!answered && !complete) {
      errors.push_back(TransportError(o, endpoint, error));
      if (kind == CallKind::kWrite && !NotSent(error)) {
        return Unavailable("etcd write to " + path + " sent but unanswered, " + kOutcomeUnknown +
                           " (" + errors.back() +
                           "); read the key back to learn whether it applied");
      }
      continue;
    }
    if (!complete) {
      return DataError(fmt::format(
          "etcd at {} answered HTTP {} to {} with something that is not JSON: '{}' (is this "
          "etcd's client port, and etcd 3.4 or newer?)",
          endpoint, status, path, body.substr(0, 200)));
    }
    if (status == 200 && !reply.contains("error")) {
      preferred.store(i);
      return reply;
    }
    int64_t code = 0;
    (void)Int64Field(reply, "code", &code);
    const std::string message = reply.contains("message") && reply["message"].is_string()
                                    ? reply["message"].get<std::string>()
                                    : fmt::format("HTTP {}: {}", status, body.substr(0, 200));
    Status st = FromEtcdError(static_cast<int>(code), message, endpoint);
    if (st.code() != StatusCode::kUnavailable) return st;
    errors.push_back(endpoint + ": " + message);
    if (kind == CallKind::kWrite && !NotApplied(message)) {
      return Unavailable("etcd write to " + path + " failed with " + kOutcomeUnknown + " (" +
                         errors.back() + "); read the key back to learn whether it applied");
    }
  }
  return NoEndpointAnswered(errors);
#endif
}

}  // namespace tenax::etcd::internal
