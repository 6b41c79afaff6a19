// The launcher-rank seam: what crosses between `tenax launch` and the processes it supervises,
// as types. Everything here is torch-free and is included by both sides (the launcher in
// launch/, the trainer in train/), so a value with a meaning is an enum here, not a bare number
// or a string compared in several places. docs/launcher_protocol.md describes the protocol;
// docs/exit_codes.md the exit codes.
//
// What crosses, and where it is defined:
//   environment at start-up and the standby assignment line    rank_context.h
//   heartbeats (progress, phase, timings)                       heartbeat.h
//   exit reports (a rank says why it exits, before it exits)    exit_report.h
//   the fault-injection spec and the faults that fired          fault_injection.h
//   flight records (the last collectives, dumped on a hang)     flight_recorder.h,
//                                                               flight_analysis.h
//   exit codes, phases, failure kinds, file names               this file
// Non-goals: transport between nodes (each node's launcher reads its own ranks' files).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tenax/core/status.h"

namespace tenax::protocol {

// How a tenax process ends (docs/exit_codes.md). Every StatusCode has the exit code of the same
// name and value (2-8, 10, 12; FromStatus maps them one by one): `main` exits with its Status's
// code. A process killed by signal N reports 128 + N (shells and the launcher).
enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,            // unspecified failure (an injected crash with how=exit, by default)
  kInvalidArgument = 2,    // bad flag, config value or inject spec: fix the input
  kNotFound = 3,           // a file, corpus or checkpoint that should exist does not
  kDataError = 4,          // damaged or incompatible data or checkpoint
  kIoError = 5,            // the filesystem failed (disk full, permissions)
  kInternal = 6,           // an unexpected libtorch failure
  kNumerical = 7,          // diverged (NaN/Inf, or a loss spike with on_loss_spike = "stop")
  kUnavailable = 8,        // a service is gone; also the deliberate "restart me" exits
  kCollectiveTimeout = 9,  // the flight recorder's watchdog saw a collective time out
  kPeerLost = 10,          // secondary: a collective lost its partner because another rank died
  kLauncherLost = 11,      // the rank's launcher is gone; the rank stopped itself
  kBusy = 12,              // another process owns the run folder
  kHang = 124,             // (launcher) no rank finished a step within the hang timeout
  kStraggler = 125,        // (launcher) a straggler replaced with --replace-stragglers
};

constexpr int ToInt(ExitCode c) { return static_cast<int>(c); }
// The code of a Status (its StatusCode value; 0 for OK).
ExitCode FromStatus(const Status& st);
// The code of a waitpid() status: the exit code, or 128 + the signal.
int FromWaitStatus(int wait_status);
// Whether starting the job again can help after a rank ended with `code` (any int: signals are
// 128 + N and restartable). Bad input, missing files, damaged data, divergence and a busy run
// folder are not.
bool Restartable(int code);
// A verb phrase for logs: "was killed by signal 9 (Killed)", "exited with code 5 (I/O error)".
std::string DescribeExitCode(int code);

// Where a rank is, as its heartbeats say (heartbeat.h). kSetup: no beat yet. kFinish: its work
// is done and durable (last step, final checkpoint committed); only its teardown is left.
enum class Phase { kSetup, kReady, kTrain, kCheckpoint, kNonFinite, kLossSpike, kEval, kFinish };
const char* PhaseName(Phase p);
std::optional<Phase> ParsePhase(std::string_view name);

// What a failure was (goodput.json `kind`; docs/launcher_protocol.md "Failure kinds").
enum class FailureKind {
  kCrash,              // a non-zero exit or a signal outside a checkpoint
  kCrashInCheckpoint,  // died while writing a checkpoint (also in the background)
  kCheckpointWrite,    // a checkpoint write failed with an I/O error
  kIoError,            // an I/O error elsewhere
  kNonFinite,          // NaN/Inf with training.on_nonfinite = "restart"
  kLossSpike,          // a loss spike with training.on_loss_spike = "restart"
  kHang,               // no rank progressed within the hang timeout
  kStraggler,          // a straggler replaced with --replace-stragglers
  kSetup,              // died before its first beat
  kCorruptCheckpoint,  // a resume skipped committed checkpoints that did not verify
  kLauncherLost,       // the launcher itself died; its successor recorded the gap
  kPeerLost,           // (exit reports only) a consequence of another rank's failure
  kSilentCorruption,   // a replayed step disagreed: this rank computed wrong results
                       // (resilience.sdc_check_interval; train/sdc_check.h)
};
const char* FailureKindName(FailureKind k);
std::optional<FailureKind> ParseFailureKind(std::string_view name);
// Kinds that blame the machine a rank ran on, so its slot may be excluded (a spare takes the
// rank). Storage, numerics and data are not the machine's fault.
bool BlamesSlot(FailureKind k);
// Kinds proven on the machine by replay: its slot is quarantined at once, not after repeats.
bool QuarantinesAtOnce(FailureKind k);

// Files in the heartbeat folder (TENAX_HEARTBEAT_DIR), one folder per launch on each node.
std::string HeartbeatPath(const std::string& dir, int rank);     // rank-R
std::string ExitReportPath(const std::string& dir, int rank);    // exit-rank-R.json
std::string FlightRecordPath(const std::string& dir, int rank);  // flight-rankRRRRR.json
std::string FiredFaultsPath(const std::string& dir);             // faults-fired.jsonl
// The launcher's request that rank R's next step has a NaN loss (a `poisson` schedule's nan):
// the rank removes it when it poisons the step; the launcher removes stale ones when a
// generation starts.
std::string NanRequestPath(const std::string& dir, int rank);  // nan-request-rank-R

// Clocks. Both sides of the seam stamp events with these; monotonic times compare across
// processes of one machine (CLOCK_MONOTONIC is system-wide), wall times across machines.
double MonotonicNow();
double WallNow();

}  // namespace tenax::protocol
