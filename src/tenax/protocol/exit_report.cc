#include "tenax/protocol/exit_report.h"

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tenax::protocol {
namespace {

std::atomic<const ExitReporter*> g_terminate_reporter{nullptr};

[[noreturn]] void OnTerminate() {
  std::string what = "unknown exception";
  bool peer_lost = false;
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
      peer_lost = IsPeerLostError(what);
    } catch (...) {
    }
  } else {
    what = "std::terminate without an exception";
  }
  // One line on stderr first: the report file may not be writable.
  std::fprintf(stderr, "%s: %s\n",
               peer_lost ? "tenax: a peer was lost (another rank failed first)"
                         : "tenax: uncaught exception",
               what.c_str());
  std::fflush(stderr);
  const ExitReporter* reporter = g_terminate_reporter.load();
  if (reporter != nullptr && reporter->reported_code() != 0) {
    // The failure was reported already; this is its teardown going wrong. Keep the report.
    std::_Exit(reporter->reported_code());
  }
  if (peer_lost) {
    if (reporter != nullptr) {
      reporter->Report(ToInt(ExitCode::kPeerLost), FailureKind::kPeerLost, what);
    }
    std::_Exit(ToInt(ExitCode::kPeerLost));
  }
  // A bug: where it happened, for the report (symbols need -rdynamic; addresses still help).
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  if (reporter != nullptr) {
    reporter->Report(128 + SIGABRT, FailureKind::kCrash, "uncaught exception: " + what);
  }
  std::abort();
}

}  // namespace

std::optional<ExitReport> ReadExitReport(const std::string& dir, int rank) {
  std::ifstream in(ExitReportPath(dir, rank));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("code")) return std::nullopt;
  ExitReport r;
  r.generation = j.value("generation", 0);
  r.rank = j.value("rank", -1);
  r.pid = j.value("pid", 0);
  r.code = j.value("code", 0);
  r.kind = ParseFailureKind(j.value("kind", std::string())).value_or(FailureKind::kCrash);
  r.secondary = j.value("secondary", false);
  r.cause = j.value("cause", std::string());
  r.exact = j.value("exact", false);
  r.wall_s = j.value("wall_s", 0.0);
  r.mono_s = j.value("mono_s", 0.0);
  return r;
}

Status PeerLostError(const std::string& message) {
  return PeerLost("a collective lost its partner (another rank failed first): " + message);
}

bool IsPeerLostError(std::string_view m) {
  for (const char* pattern :
       {// Gloo and the c10d store
        "Connection closed by peer", "Connection reset by peer", "Broken pipe",
        "caused pair closure", "Timed out waiting", "failed to recv, got 0 bytes",
        "Connection refused", "Socket Timeout",
        // a live group's collective whose member the launcher dropped (parallel/live_group.h)
        "collective abandoned:",
        // NCCL (ncclRemoteError, its socket transport) and c10d's NCCL group after an abort
        "remote process exited or there was a network error", "ncclRemoteError",
        "Connection closed by remote peer", "NCCL communicator was aborted"}) {
    if (m.find(pattern) != std::string_view::npos) return true;
  }
  return false;
}

void ExitReporter::Report(int code, FailureKind kind, std::string_view cause, bool secondary,
                          bool exact) const {
  int none = 0;
  if (!reported_code_.compare_exchange_strong(none, code)) return;  // the first report stands
  if (dir_.empty()) return;
  const nlohmann::json j = {{"generation", generation_},
                            {"rank", rank_},
                            {"pid", static_cast<int>(::getpid())},
                            {"code", code},
                            {"kind", FailureKindName(kind)},
                            {"secondary", secondary || kind == FailureKind::kPeerLost},
                            {"cause", std::string(cause)},
                            {"exact", exact},
                            {"wall_s", WallNow()},
                            {"mono_s", MonotonicNow()}};
  const std::string path = ExitReportPath(dir_, rank_);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    if (!out) return;  // best effort: the launcher then judges from the exit status alone
  }
  std::rename(tmp.c_str(), path.c_str());
}

void InstallTerminateHandler(const ExitReporter* reporter) {
  g_terminate_reporter.store(reporter);
  std::set_terminate(OnTerminate);
}

}  // namespace tenax::protocol
