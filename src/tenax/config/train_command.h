// The `tenax train` command line (--config, --set, --defaults, --metrics-port/-addr), defined
// once: the tenax-torch CLI parses it to train, and `tenax launch` parses the same words after
// `--` to check the config and find the run folder before it starts any rank.
#pragma once

#include <string>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tenax {

struct TrainCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value, in order
  // --defaults: no config file, the built-in defaults (a small debug model on the Brown corpus)
  // plus --set. Without it a missing --config is an error: a forgotten flag must not train a
  // model nobody asked for.
  bool defaults = false;
  // --metrics-port: the lead rank serves the live page (/) and Prometheus metrics (/metrics) of
  // its run on --metrics-addr (default loopback); 0: none.
  int metrics_port = 0;
  std::string metrics_addr = "127.0.0.1";
};

// Adds the options to a CLI11 (sub)command, filling `out` when it is parsed.
void AddTrainOptions(CLI::App& command, TrainCommand* out);
// Parses the words after `train` (e.g. {"--config", "c.toml", "--set", "a.b=1"}); a word the
// train command does not accept is InvalidArgument naming it.
Result<TrainCommand> ParseTrainCommand(const std::vector<std::string>& args);
// The config the command trains: --config with --set applied, or --defaults with --set; neither
// is InvalidArgument saying how to choose.
Result<Config> LoadTrainConfig(const TrainCommand& command);

}  // namespace tenax
