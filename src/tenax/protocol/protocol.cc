#include "tenax/protocol/protocol.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <time.h>

#include <array>
#include <cstring>
#include <utility>

namespace tenax::protocol {
namespace {

constexpr std::array<std::pair<Phase, const char*>, 8> kPhases = {{
    {Phase::kSetup, "setup"},
    {Phase::kReady, "ready"},
    {Phase::kTrain, "train"},
    {Phase::kCheckpoint, "checkpoint"},
    {Phase::kNonFinite, "nonfinite"},
    {Phase::kLossSpike, "loss-spike"},
    {Phase::kEval, "eval"},
    {Phase::kFinish, "finish"},
}};

constexpr std::array<std::pair<FailureKind, const char*>, 13> kFailureKinds = {{
    {FailureKind::kCrash, "crash"},
    {FailureKind::kCrashInCheckpoint, "crash-in-checkpoint"},
    {FailureKind::kCheckpointWrite, "checkpoint-write"},
    {FailureKind::kIoError, "io-error"},
    {FailureKind::kNonFinite, "nonfinite"},
    {FailureKind::kLossSpike, "loss-spike"},
    {FailureKind::kHang, "hang"},
    {FailureKind::kStraggler, "straggler"},
    {FailureKind::kSetup, "setup"},
    {FailureKind::kCorruptCheckpoint, "corrupt-checkpoint"},
    {FailureKind::kLauncherLost, "launcher-lost"},
    {FailureKind::kPeerLost, "peer-lost"},
    {FailureKind::kSilentCorruption, "silent-corruption"},
}};

double ClockSeconds(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

ExitCode FromStatus(const Status& st) {
  switch (st.code()) {  // no default: a new StatusCode must be given its exit code here
    case StatusCode::kOk:
      return ExitCode::kOk;
    case StatusCode::kInvalidArgument:
      return ExitCode::kInvalidArgument;
    case StatusCode::kNotFound:
      return ExitCode::kNotFound;
    case StatusCode::kDataError:
      return ExitCode::kDataError;
    case StatusCode::kIoError:
      return ExitCode::kIoError;
    case StatusCode::kInternal:
      return ExitCode::kInternal;
    case StatusCode::kNumerical:
      return ExitCode::kNumerical;
    case StatusCode::kUnavailable:
      return ExitCode::kUnavailable;
    case StatusCode::kPeerLost:
      return ExitCode::kPeerLost;
    case StatusCode::kBusy:
      return ExitCode::kBusy;
  }
  return ExitCode::kFailure;
}

int FromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return ToInt(ExitCode::kFailure);
}

bool Restartable(int code) {
  switch (static_cast<ExitCode>(code)) {
    case ExitCode::kInvalidArgument:
    case ExitCode::kNotFound:
    case ExitCode::kDataError:
    case ExitCode::kNumerical:
    case ExitCode::kBusy:
      return false;
    default:
      return true;
  }
}

std::string DescribeExitCode(int code) {
  if (code > 128 && code < 128 + 65) {
    return fmt::format("was killed by signal {} ({})", code - 128, ::strsignal(code - 128));
  }
  const char* meaning = nullptr;
  switch (static_cast<ExitCode>(code)) {
    case ExitCode::kOk:
      meaning = "success";
      break;
    case ExitCode::kFailure:
      break;
    case ExitCode::kInvalidArgument:
      meaning = "invalid argument: fix the input";
      break;
    case ExitCode::kNotFound:
      meaning = "not found";
      break;
    case ExitCode::kDataError:
      meaning = "damaged or incompatible data";
      break;
    case ExitCode::kIoError:
      meaning = "I/O error";
      break;
    case ExitCode::kInternal:
      meaning = "internal error";
      break;
    case ExitCode::kNumerical:
      meaning = "diverged";
      break;
    case ExitCode::kUnavailable:
      meaning = "unavailable, or asked for a restart";
      break;
    case ExitCode::kCollectiveTimeout:
      meaning = "collective timeout";
      break;
    case ExitCode::kPeerLost:
      meaning = "lost a peer that failed first";
      break;
    case ExitCode::kLauncherLost:
      meaning = "its launcher is gone";
      break;
    case ExitCode::kBusy:
      meaning = "the run folder belongs to another process";
      break;
    case ExitCode::kHang:
      meaning = "hang";
      break;
    case ExitCode::kStraggler:
      meaning = "straggler replaced";
      break;
  }
  return meaning ? fmt::format("exited with code {} ({})", code, meaning)
                 : fmt::format("exited with code {}", code);
}

const char* PhaseName(Phase p) {
  for (const auto& [value, name] : kPhases) {
    if (value == p) return name;
  }
  return "?";
}

std::optional<Phase> ParsePhase(std::string_view name) {
  for (const auto& [value, n] : kPhases) {
    if (name == n) return value;
  }
  return std::nullopt;
}

const char* FailureKindName(FailureKind k) {
  for (const auto& [value, name] : kFailureKinds) {
    if (value == k) return name;
  }
  return "?";
}

std::optional<FailureKind> ParseFailureKind(std::string_view name) {
  for (const auto& [value, n] : kFailureKinds) {
    if (name == n) return value;
  }
  return std::nullopt;
}

bool BlamesSlot(FailureKind k) {
  return k == FailureKind::kCrash || k == FailureKind::kCrashInCheckpoint ||
         k == FailureKind::kHang || k == FailureKind::kStraggler || k == FailureKind::kSetup ||
         k == FailureKind::kSilentCorruption;
}

bool QuarantinesAtOnce(FailureKind k) { return k == FailureKind::kSilentCorruption; }

std::string HeartbeatPath(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank);
}
std::string ExitReportPath(const std::string& dir, int rank) {
  return dir + "/exit-rank-" + std::to_string(rank) + ".json";
}
std::string FlightRecordPath(const std::string& dir, int rank) {
  return fmt::format("{}/flight-rank{:05d}.json", dir, rank);
}
std::string FiredFaultsPath(const std::string& dir) { return dir + "/faults-fired.jsonl"; }
std::string NanRequestPath(const std::string& dir, int rank) {
  return dir + "/nan-request-rank-" + std::to_string(rank);
}

double MonotonicNow() { return ClockSeconds(CLOCK_MONOTONIC); }
double WallNow() { return ClockSeconds(CLOCK_REALTIME); }

}  // namespace tenax::protocol
