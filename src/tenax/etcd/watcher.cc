// EtcdWatcher: a watch stream over the gateway, resumed losslessly (see client.h).
#include <fmt/format.h>

#include "tenax/etcd/client.h"
#include "tenax/etcd/internal.h"

namespace tenax::etcd {

using json = nlohmann::json;
using std::chrono::milliseconds;
using namespace internal;  // NOLINT: this file implements on top of the internals

EtcdWatcher::EtcdWatcher(EtcdOptions options, std::string prefix, int64_t start_revision,
                         EventsFn on_events, ErrorFn on_error, WatchOptions watch)
    : options_(std::move(options)),
      prefix_(std::move(prefix)),
      on_events_(std::move(on_events)),
      on_error_(std::move(on_error)),
      watch_(watch),
      next_revision_(start_revision),
      thread_([this] { Run(); }) {}

Result<std::unique_ptr<EtcdWatcher>> EtcdWatcher::Start(EtcdOptions options, std::string prefix,
                                                        int64_t start_revision, EventsFn on_events,
                                                        ErrorFn on_error, WatchOptions watch) {
  if (start_revision < 1) {
    return InvalidArgument(
        "EtcdWatcher: start_revision must be >= 1 (a read's revision + 1), so that no change "
        "between the read and the watch is missed");
  }
  if (!on_events) return InvalidArgument("EtcdWatcher: no events callback");
  // Validates the options the same way the client does.
  TENAX_ASSIGN_OR_RETURN(auto probe, EtcdClient::Create(options));
  (void)probe;
  return std::unique_ptr<EtcdWatcher>(new EtcdWatcher(std::move(options), std::move(prefix),
                                                      start_revision, std::move(on_events),
                                                      std::move(on_error), watch));
}

EtcdWatcher::~EtcdWatcher() { Stop(); }

void EtcdWatcher::Stop() {
  stop_.store(true);
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.notify_all();
    // The stream's thread may be between creating its connection and registering it, or in a
    // connect (which cpp-httplib's stop() waits out), so cancel until the thread says it is done.
    while (!done_) {
      if (cancel_stream_) cancel_stream_();
      cv_.wait_for(lock, milliseconds(20));
    }
  }
  if (thread_.joinable()) thread_.join();
}

void EtcdWatcher::Run() {
  const size_t n = options_.endpoints.size();
  size_t endpoint = 0;
  std::vector<std::string> errors;
  while (!stop_.load()) {
    bool compacted = false;
    Status st = WatchOnce(options_.endpoints[endpoint], &compacted);
    if (stop_.load()) break;
    if (compacted) {
      if (on_error_) on_error_(st);
      break;
    }
    if (st.ok()) {  // the stream ended (idle, or the member closed it): resume at once
      errors.clear();
      continue;
    }
    errors.push_back(st.message());
    endpoint = (endpoint + 1) % n;
    if (errors.size() >= n) {
      if (on_error_) on_error_(NoEndpointAnswered(errors));
      errors.clear();
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, watch_.retry_interval, [this] { return stop_.load(); });
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  cv_.notify_all();
}

Status EtcdWatcher::WatchOnce(const std::string& endpoint, bool* compacted) {
#ifndef TENAX_WITH_HTTPLIB
  *compacted = false;
  return InvalidArgument(kNoHttplib);
#else
  ScopedBlockSigpipe no_sigpipe;
  TENAX_ASSIGN_OR_RETURN(auto http, MakeHttp(options_, endpoint, watch_.idle_reconnect));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_.load()) return Status::Ok();
    httplib::ClientImpl* raw = http.get();
    cancel_stream_ = [raw] { raw->stop(); };
  }
  const int64_t from = next_revision_.load();
  json create = {{"key", Base64Encode(prefix_)},
                 {"range_end", Base64Encode(PrefixEnd(prefix_))},
                 {"start_revision", std::to_string(from)},
                 {"progress_notify", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  // grpc-gateway passes Grpc-Metadata-* headers on as gRPC metadata; "hasleader" is what
  // clientv3's WithRequireLeader sets: the member cancels the watch when it loses its leader.
  req.headers = {{"Grpc-Metadata-hasleader", "true"}, {"Content-Type", "application/json"}};
  req.body = json{{"create_request", create}}.dump();

  int status = 0;
  bool created = false;
  std::string buffer, error_body;
  Status result;  // set by the receiver when the stream says something final
  bool finished = false;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  // One JSON object per line; each is a WatchResponse under "result", or the stream's end under
  // "error" (e.g. "etcdserver: no leader" when the member lost its leader: see hasleader).
  auto handle_line = [&](const std::string& line) -> bool {
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("error")) {
      const json& e = j["error"];
      const std::string why = e.is_object() && e.contains("message") && e["message"].is_string()
                                  ? e["message"].get<std::string>()
                                  : e.dump();
      result = Unavailable(endpoint + ": watch ended by etcd (" + why + ")");
      return false;
    }
    const json* r = j.is_object() && j.contains("result") ? &j["result"] : nullptr;
    if (r == nullptr || !r->is_object()) {
      result = Malformed("watch response", j);
      return false;
    }
    if (BoolField(*r, "created")) {
      // The creation's header names the store's current revision, not what was sent: the
      // history from `from` is still to come.
      created = true;
      return !stop_.load();
    }
    if (BoolField(*r, "canceled")) {
      int64_t compact = 0;
      (void)Int64Field(*r, "compact_revision", &compact);
      if (compact > 0) {
        *compacted = true;
        result = DataError(
            fmt::format("etcd watch of '{}' from revision {} at {}: history before revision {} was "
                        "compacted, so changes were lost; read the keys again and watch from there",
                        prefix_, from, endpoint, compact));
      } else {
        const std::string reason = r->contains("cancel_reason") && (*r)["cancel_reason"].is_string()
                                       ? (*r)["cancel_reason"].get<std::string>()
                                       : "no reason given";
        result = Unavailable(endpoint + ": watch canceled (" + reason + ")");
      }
      return false;
    }
    std::vector<WatchEvent> events;
    const auto it = r->find("events");
    if (it != r->end() && it->is_array()) {
      for (const auto& e : *it) {
        WatchEvent ev;
        const auto type = e.find("type");
        ev.type = type != e.end() && type->is_string() && type->get<std::string>() == "DELETE"
                      ? WatchEvent::Type::kDelete
                      : WatchEvent::Type::kPut;
        const auto kv = e.find("kv");
        if (kv == e.end()) {
          result = Malformed("watch event", e);
          return false;
        }
        auto parsed = ParseKeyValue(*kv);
        if (!parsed.ok()) {
          result = parsed.status();
          return false;
        }
        ev.kv = std::move(parsed).value();
        events.push_back(std::move(ev));
      }
    }
    if (!events.empty()) {
      // Events come in revision order; a resumed stream starts after the last one delivered.
      if (stop_.load()) return false;
      // Advanced before the callback, so that whoever the callback wakes sees next_revision()
      // past these events (the stream cannot resume before the callback returns anyway).
      next_revision_.store(events.back().kv.mod_revision + 1);
      on_events_(events);
    } else {
      // A progress notification: every event up to the header's revision has been sent, so
      // resuming after it loses nothing.
      int64_t rev = 0;
      const auto h = r->find("header");
      if (h != r->end() && Int64Field(*h, "revision", &rev) && rev + 1 > next_revision_.load()) {
        next_revision_.store(rev + 1);
      }
    }
    return !stop_.load();
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) -> bool {
    if (status != 200) {
      error_body.append(data, size);
      return error_body.size() < 4096;
    }
    buffer.append(data, size);
    size_t start = 0;
    for (size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (nl > start && !handle_line(buffer.substr(start, nl - start))) {
        finished = true;
        return false;
      }
    }
    buffer.erase(0, start);
    return true;
  };

  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  http->send(req, res, error);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_stream_ = nullptr;
  }
  if (finished) return result;
  if (status != 0 && status != 200) {
    return Unavailable(fmt::format("{}: watch refused with HTTP {}: {}", endpoint, status,
                                   error_body.substr(0, 200)));
  }
  if (!created) return Unavailable(TransportError(options_, endpoint, error));
  // The stream was up and ended: idle for watch_.idle_reconnect, or the member went away.
  return Status::Ok();
#endif
}
}  // namespace tenax::etcd
