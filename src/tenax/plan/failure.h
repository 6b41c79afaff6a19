// Failure arithmetic that needs no simulation: failure rates as people report them, the job's mean
// time between failures, the optimal checkpoint interval (Young 1974, Daly 2006) and Daly's
// expected wall-clock time for a job that checkpoints and restarts.
// Non-goals: correlated failures (a switch taking out a rack), non-exponential lifetimes.
#pragma once

#include <cstdint>
#include <string>

#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"

namespace tenax::plan {

// A failure rate per node (a host of gpus_per_node GPUs; clouds call it an instance).
struct FailureRate {
  double per_node_hour = 0;
  std::string text;  // what the user wrote, for reports
};

// Accepts "0.0004/node-hour", "0.04%/instance-hour", "2e-5/gpu-hour", "1.5/node-day", and a
// reported count "419 in 54d on 16384 gpus" (or "... on 2048 nodes").
Result<FailureRate> ParseFailureRate(const std::string& text, int64_t gpus_per_node);

// Mean time between failures of a job on `nodes` nodes, in seconds.
double JobMtbfSeconds(const FailureRate& rate, int64_t nodes);

// Young (1974): tau = sqrt(2 C M), C the checkpoint cost, M the MTBF (seconds).
double YoungInterval(double checkpoint_cost, double mtbf);
// Daly (2006): tau = sqrt(2 C M) [1 + (1/3) sqrt(C / 2M) + (1/9) (C / 2M)] - C for C < 2M,
// else tau = M. The interval is compute time between the ends of consecutive checkpoints' stalls.
double DalyInterval(double checkpoint_cost, double mtbf);
// Daly (2006): expected wall-clock time to finish `work` seconds of computation with
// interval tau, checkpoint cost C, restart cost R and MTBF M (failures may strike during
// computation, checkpoints and restarts alike):  M e^{R/M} (e^{(tau + C)/M} - 1) work / tau.
double DalyExpectedWallTime(double work, double tau, double checkpoint_cost, double restart_cost,
                            double mtbf);

// A checkpoint's stall from the model and the storage bandwidth: tenax writes fp32 weights and
// AdamW's two moments, 12 bytes per parameter, and a mixture-of-experts model's checkpoint holds
// every expert (its total, not its active, parameters). `bandwidth` ("10G" or "10GB/s": bytes
// per second, as ParseCount reads counts). `description` receives the arithmetic, for reports.
Result<double> CheckpointCostFromModel(const ModelSpec& model, const std::string& bandwidth,
                                       std::string* description);

}  // namespace tenax::plan
