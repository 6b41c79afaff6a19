// The HTTP half of checkpoint_sync.h: the file server with its replica store, and the two client
// calls. The wire protocol is described in the header.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tenax/checkpoint/manifest.h"
#include "tenax/core/crc32.h"
#include "tenax/core/log.h"
#include "tenax/core/sigpipe.h"
#include "tenax/transfer/checkpoint_sync.h"

#ifdef TENAX_WITH_HTTPLIB
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#endif

namespace tenax::transfer {
namespace {

[[maybe_unused]] constexpr const char* kNoHttplib =
    "this tenax was built without cpp-httplib, so node agents cannot exchange checkpoint files: "
    "install Debian's libcpp-httplib-dev (scripts/setup does) and rebuild";

}  // namespace

bool CheckpointTransferAvailable() {
#ifdef TENAX_WITH_HTTPLIB
  return true;
#else
  return false;
#endif
}

std::string ReplicaPath(const std::string& replica_root, int64_t step, const std::string& name) {
  return JoinPath(JoinPath(replica_root, ckpt::StepDirName(step)), name);
}

#ifdef TENAX_WITH_HTTPLIB
namespace {

using std::chrono::milliseconds;

constexpr const char* kSourceHeader = "X-Tenax-Source";
constexpr const char* kCrcHeader = "X-Tenax-Crc32";
constexpr const char* kOctets = "application/octet-stream";
constexpr const char* kText = "text/plain";

// A step as it appears in a path: 1 to 18 decimal digits (fits int64).
std::optional<int64_t> ParseStep(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

// A data file name (no '/', no leading '.', not a reserved name) without control characters: a
// NUL decoded from "%00" would cut the path short when opened.
Status ValidateTransferName(const std::string& name) {
  TENAX_RETURN_IF_ERROR(ckpt::ValidateDataFileName(name));
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgument("invalid checkpoint file name: it contains a control character");
    }
  }
  return Status::Ok();
}

std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// Compares in time that depends only on the expected secret's length, not on where a guess
// first differs.
bool SecretMatches(const std::string& given, const std::string& expected) {
  unsigned diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

std::optional<uint32_t> ParseCrcHex(const std::string& s) {
  if (s.size() != 8 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
}

template <typename T>
void SetTimeouts(T& c, milliseconds connect, milliseconds io) {
  c.set_connection_timeout(connect.count() / 1000, (connect.count() % 1000) * 1000);
  c.set_read_timeout(io.count() / 1000, (io.count() % 1000) * 1000);
  c.set_write_timeout(io.count() / 1000, (io.count() % 1000) * 1000);
}

bool SplitHostPort(const std::string& endpoint, std::string* host, int* port) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || endpoint.find(':') != colon) return false;
  const std::string p = endpoint.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *port = std::stoi(p);
  *host = endpoint.substr(0, colon);
  return *port >= 1 && *port <= 65535;
}

Result<std::unique_ptr<httplib::ClientImpl>> MakeClient(const FilePeer& peer,
                                                        const TransferOptions& o) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(peer.endpoint, &host, &port)) {
    return InvalidArgument(
        fmt::format("checkpoint peer {}: '{}' is not HOST:PORT", peer.label(), peer.endpoint));
  }
  auto c = std::make_unique<httplib::ClientImpl>(host, port);
  c->set_keep_alive(false);
  c->set_tcp_nodelay(true);
  c->set_url_encode(false);  // the path is percent-encoded already
  SetTimeouts(*c, o.connect_timeout, o.io_timeout);
  return c;
}

std::string FilePath(const char* kind, int64_t step, const std::string& name) {
  return fmt::format("/v1/steps/{}/{}/{}", step, kind, PercentEncode(name));
}

// Maps a peer's non-200 answer onto a Status; `what` names the peer, the step and the file.
Status FromHttpStatus(int status, const std::string& body, const std::string& what) {
  const std::string text = fmt::format("{}: HTTP {}: {}", what, status, body.substr(0, 300));
  switch (status) {
    case 403:
      return InvalidArgument(text +
                             " (the peer refused this job's secret: is it an agent of another "
                             "job, or one started before the secret changed?)");
    case 404:
      return NotFound(text);
    case 400:
    case 409:
      return InvalidArgument(text);
    default:
      return IoError(text);
  }
}

}  // namespace

// --- the server --------------------------------------------------------------------------------

struct CheckpointFileServer::Impl {
  // Constant after construction.
  FileServerOptions options;
  int port = 0;

  httplib::Server http;
  std::atomic<int64_t> refused{0};

  std::mutex mu;
  // Guarded by mu: the newest step the replica store holds files of.
  std::optional<int64_t> replica_step;

  std::thread thread;  // runs http.listen_after_bind()
  std::atomic<bool> listen_returned{false};

  // Scans the replica root for the steps it holds (replicas outlive an agent restart).
  Result<std::vector<int64_t>> HeldSteps() {
    Result<std::vector<std::string>> names = LocalFs().ListDir(options.replica_root);
    if (!names.ok()) {
      if (names.status().code() == StatusCode::kNotFound) return std::vector<int64_t>{};
      return names.status();
    }
    std::vector<int64_t> steps;
    for (const auto& n : *names) {
      if (auto s = ckpt::ParseStepDirName(n)) steps.push_back(*s);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }

  // Drops every held step for which `drop` is true. Caller holds mu.
  template <typename Pred>
  Status DropHeld(Pred drop) {
    TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, HeldSteps());
    replica_step.reset();
    for (int64_t s : steps) {
      if (drop(s)) {
        TENAX_RETURN_IF_ERROR(
            LocalFs().RemoveAll(JoinPath(options.replica_root, ckpt::StepDirName(s))));
      } else {
        replica_step = s;
      }
    }
    return Status::Ok();
  }

  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (SecretMatches(req.get_header_value(kJobSecretHeader), options.secret)) return true;
    const int64_t n = refused.fetch_add(1) + 1;
    // Rate-limited: a scanner must not flood the agent's log.
    if (n <= 5 || n % 100 == 0) {
      log::Warn(
          "checkpoint file server: refused {} {} from {} (wrong or missing job secret; {} "
          "refused so far)",
          req.method, req.path, req.remote_addr, n);
    }
    res.status = 403;
    res.set_content("wrong or missing job secret\n", kText);
    return false;
  }

  // Step and name from the path; answers 400 and returns false when either is bad.
  static bool ParsePath(const httplib::Request& req, httplib::Response& res, int64_t* step,
                        std::string* name) {
    const std::optional<int64_t> s = ParseStep(req.matches[1].str());
    *name = req.matches[2].str();
    Status st = s ? ValidateTransferName(*name) : InvalidArgument("the step is not a number");
    if (!st.ok()) {
      res.status = 400;
      res.set_content(st.message() + "\n", kText);
      return false;
    }
    *step = *s;
    return true;
  }

  void ServeFile(const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    int64_t step = 0;
    std::string name;
    if (!ParsePath(req, res, &step, &name)) return;
    const bool replica_only = req.get_param_value("from") == "replica";
    const std::pair<std::string, const char*> candidates[] = {
        {JoinPath(JoinPath(options.checkpoint_folder, ckpt::StepDirName(step)), name), "folder"},
        {ReplicaPath(options.replica_root, step, name), "replica"}};
    for (const auto& [path, source] : candidates) {
      if (replica_only && std::strcmp(source, "folder") == 0) continue;
      // O_NOFOLLOW: tenax never puts links there, so one is not followed out of the folder.
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) continue;
      // Owned by the content provider, which cpp-httplib keeps until the response is written.
      auto file = std::shared_ptr<int>(new int(fd), [](int* p) {
        ::close(*p);
        delete p;
      });
      struct stat st;
      if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
      res.set_header(kSourceHeader, source);
      const auto size = static_cast<size_t>(st.st_size);
      if (size == 0) {
        res.set_content("", kOctets);
        return;
      }
      // Streamed with pread rather than read whole or mapped: a file truncated under us (by
      // hand; tenax replaces files by rename) ends the response short instead of faulting.
      res.set_content_provider(
          size, kOctets, [file](size_t offset, size_t length, httplib::DataSink& sink) {
            char buf[1 << 16];
            const ssize_t n =
                ::pread(*file, buf, std::min(length, sizeof(buf)), static_cast<off_t>(offset));
            return n > 0 && sink.write(buf, static_cast<size_t>(n));
          });
      return;
    }
    res.status = 404;
    res.set_content(fmt::format("this node has no file {} of step {} (neither in its checkpoint "
                                "folder nor among its replicas)\n",
                                name, step),
                    kText);
  }

  void StoreReplica(const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader* reader) {
    // Drain the body whatever the answer: closing a connection with unread data resets it,
    // and the client would see a broken connection instead of the refusal.
    std::string body;
    const auto drain = [&] {
      if (reader != nullptr) (*reader)([](const char*, size_t) { return true; });
    };
    if (!Authorized(req, res)) return drain();
    int64_t step = 0;
    std::string name;
    if (!ParsePath(req, res, &step, &name)) return drain();
    const std::optional<uint32_t> crc = ParseCrcHex(req.get_header_value(kCrcHeader));
    if (!crc) {
      drain();
      res.status = 400;
      res.set_content(std::string("missing or bad ") + kCrcHeader + " header\n", kText);
      return;
    }
    if (reader != nullptr && !(*reader)([&](const char* data, size_t n) {
          body.append(data, n);
          return true;
        })) {
      return;  // the connection broke: nothing to answer, nothing stored
    }
    if (Crc32(body) != *crc) {
      res.status = 400;
      res.set_content(fmt::format("{} of step {}: the body's CRC-32 is {}, the header says {}\n",
                                  name, step, ckpt::CrcHex(Crc32(body)), ckpt::CrcHex(*crc)),
                      kText);
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (replica_step && *replica_step > step) {
      res.status = 409;
      res.set_content(fmt::format("this node holds replicas of step {}, newer than {}; a stale "
                                  "push is refused\n",
                                  *replica_step, step),
                      kText);
      return;
    }
    const std::string path = ReplicaPath(options.replica_root, step, name);
    Status st = LocalFs().CreateDirs(ParentDir(path));
    if (st.ok()) st = LocalFs().WriteFileAtomic(path, body);
    // Older steps go only once the newer file is safely written, and the newest complete one
    // (the step held before this one) stays until a step after this one arrives: a node lost
    // while this step's files are on their way can still be restored from it.
    if (st.ok() && replica_step != step) {
      const int64_t keep_from = replica_step ? *replica_step : step;
      st = DropHeld([keep_from](int64_t s) { return s < keep_from; });
    }
    if (!st.ok()) {
      // 507 Insufficient Storage: the RAM folder is full or failing.
      res.status = 507;
      res.set_content(st.message() + "\n", kText);
      log::Warn("checkpoint file server: cannot store a replica: {}", st.message());
      return;
    }
    replica_step = step;
    res.status = 200;
    res.set_content("stored\n", kText);
  }
};

CheckpointFileServer::CheckpointFileServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CheckpointFileServer::~CheckpointFileServer() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::unique_ptr<CheckpointFileServer>> CheckpointFileServer::Start(
    FileServerOptions options) {
  if (options.secret.empty()) {
    return InvalidArgument("checkpoint file server: the job secret is empty");
  }
  if (options.checkpoint_folder.empty() || options.replica_root.empty()) {
    return InvalidArgument("checkpoint file server: needs a checkpoint folder and a replica root");
  }
  if (options.threads < 1 || options.io_timeout < milliseconds(1)) {
    return InvalidArgument("checkpoint file server: threads and io_timeout must be positive");
  }
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(options.replica_root));

  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl* p = impl.get();
  const int threads = p->options.threads;
  p->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // One request per connection: clients open a fresh one per call, and a lingering keep-alive
  // connection would hold one of the few server threads.
  p->http.set_keep_alive_max_count(1);
  p->http.set_tcp_nodelay(true);
  const auto io = p->options.io_timeout;
  p->http.set_read_timeout(io.count() / 1000, (io.count() % 1000) * 1000);
  p->http.set_write_timeout(io.count() / 1000, (io.count() % 1000) * 1000);
  // Names may contain anything but '/': validated in the handler, so a bad one gets a 400 that
  // says why instead of an anonymous 404.
  p->http.Get(R"(/v1/steps/([^/]*)/files/(.*))",
              [p](const httplib::Request& req, httplib::Response& res) { p->ServeFile(req, res); });
  p->http.Put(R"(/v1/steps/([^/]*)/replicas/(.*))",
              [p](const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader) { p->StoreReplica(req, res, &reader); });
  // cpp-httplib routes a PUT without a body (an empty file) to the plain handlers only.
  p->http.Put(R"(/v1/steps/([^/]*)/replicas/(.*))",
              [p](const httplib::Request& req, httplib::Response& res) {
                p->StoreReplica(req, res, nullptr);
              });

  {
    TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> held, p->HeldSteps());
    if (!held.empty()) p->replica_step = held.back();
  }
  const std::string& address = p->options.address;
  if (p->options.port == 0) {
    p->port = p->http.bind_to_any_port(address);
  } else {
    p->port = p->http.bind_to_port(address, p->options.port) ? p->options.port : -1;
  }
  if (p->port <= 0) {
    return Unavailable(fmt::format(
        "checkpoint file server: cannot listen on {}:{} ({}); is the address one of this host's, "
        "and the port free?",
        address, p->options.port == 0 ? std::string("any port") : std::to_string(p->options.port),
        std::strerror(errno)));
  }
  // The listening socket exists (connections queue from now on); serve them on our thread.
  p->thread = std::thread([p] {
    p->http.listen_after_bind();
    p->listen_returned = true;
  });
  // httplib's stop() does nothing until the listener runs: wait for it (microseconds), so that
  // a destructor called at once cannot miss it and join a thread that never ends.
  while (!p->http.is_running() && !p->listen_returned) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  return std::unique_ptr<CheckpointFileServer>(new CheckpointFileServer(std::move(impl)));
}

int CheckpointFileServer::port() const { return impl_->port; }

std::string CheckpointFileServer::endpoint() const {
  return impl_->options.address + ":" + std::to_string(impl_->port);
}

std::optional<int64_t> CheckpointFileServer::replica_step() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->replica_step;
}

Status CheckpointFileServer::DropReplicasNewerThan(int64_t step) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->DropHeld([step](int64_t s) { return s > step; });
}

int64_t CheckpointFileServer::refused() const { return impl_->refused.load(); }

// --- the client calls --------------------------------------------------------------------------

Result<FetchedFile> FetchCheckpointFile(const FilePeer& peer, const std::string& secret,
                                        int64_t step, const std::string& name,
                                        const TransferOptions& options, PeerSource from) {
  TENAX_RETURN_IF_ERROR(ValidateTransferName(name));
  const std::string what = fmt::format("fetching {} of step {} from {}{}", name, step, peer.label(),
                                       from == PeerSource::kReplica ? "'s replicas" : "");
  if (secret.empty()) return InvalidArgument(what + ": the job secret is empty");
  TENAX_ASSIGN_OR_RETURN(auto client, MakeClient(peer, options));
  ScopedBlockSigpipe no_sigpipe;
  int status = 0;
  FetchedFile out;
  const httplib::Headers headers = {{kJobSecretHeader, secret}};
  auto result = client->Get(
      FilePath("files", step, name) + (from == PeerSource::kReplica ? "?from=replica" : ""),
      headers,
      [&](const httplib::Response& r) {
        status = r.status;
        out.source = r.get_header_value(kSourceHeader);
        // Capped: the length is the peer's claim, and the peer is not authenticated to us.
        const uint64_t length = r.get_header_value<uint64_t>("Content-Length");
        if (r.status == 200) out.bytes.reserve(std::min<uint64_t>(length, uint64_t{1} << 30));
        return true;
      },
      [&](const char* data, size_t n) {
        out.bytes.append(data, n);
        return true;
      });
  if (!result) {
    return Unavailable(
        fmt::format("{} ({}): {}", what, peer.endpoint, httplib::to_string(result.error())));
  }
  if (status != 200) return FromHttpStatus(status, out.bytes, what);
  return out;
}

Status PushReplicaFile(const FilePeer& peer, const std::string& secret, int64_t step,
                       const std::string& name, std::string_view bytes,
                       const TransferOptions& options) {
  TENAX_RETURN_IF_ERROR(ValidateTransferName(name));
  const std::string what = fmt::format("pushing {} of step {} to {}", name, step, peer.label());
  if (secret.empty()) return InvalidArgument(what + ": the job secret is empty");
  TENAX_ASSIGN_OR_RETURN(auto client, MakeClient(peer, options));
  ScopedBlockSigpipe no_sigpipe;
  const httplib::Headers headers = {{kJobSecretHeader, secret},
                                    {kCrcHeader, ckpt::CrcHex(Crc32(bytes))}};
  // Streamed from the caller's buffer (no copy of a possibly large file).
  auto result = client->Put(
      FilePath("replicas", step, name), headers, bytes.size(),
      [bytes](size_t offset, size_t length, httplib::DataSink& sink) {
        return sink.write(bytes.data() + offset, std::min<size_t>(length, 1 << 20));
      },
      kOctets);
  if (!result) {
    return Unavailable(
        fmt::format("{} ({}): {}", what, peer.endpoint, httplib::to_string(result.error())));
  }
  if (result->status != 200) return FromHttpStatus(result->status, result->body, what);
  return Status::Ok();
}

#else  // !TENAX_WITH_HTTPLIB

struct CheckpointFileServer::Impl {};
CheckpointFileServer::CheckpointFileServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointFileServer::~CheckpointFileServer() = default;
Result<std::unique_ptr<CheckpointFileServer>> CheckpointFileServer::Start(FileServerOptions) {
  return InvalidArgument(kNoHttplib);
}
int CheckpointFileServer::port() const { return 0; }
std::string CheckpointFileServer::endpoint() const { return ""; }
std::optional<int64_t> CheckpointFileServer::replica_step() const { return std::nullopt; }
Status CheckpointFileServer::DropReplicasNewerThan(int64_t) { return InvalidArgument(kNoHttplib); }
int64_t CheckpointFileServer::refused() const { return 0; }

Result<FetchedFile> FetchCheckpointFile(const FilePeer&, const std::string&, int64_t,
                                        const std::string&, const TransferOptions&, PeerSource) {
  return InvalidArgument(kNoHttplib);
}
Status PushReplicaFile(const FilePeer&, const std::string&, int64_t, const std::string&,
                       std::string_view, const TransferOptions&) {
  return InvalidArgument(kNoHttplib);
}

#endif  // TENAX_WITH_HTTPLIB

}  // namespace tenax::transfer
