#include "tenax/config/train_command.h"

#include <CLI/CLI.hpp>

#include "tenax/config/config.h"

namespace tenax {

void AddTrainOptions(CLI::App& command, TrainCommand* out) {
  command.add_option("--config,-c", out->config_path, "TOML config (see configs/)");
  command.add_option("--set", out->overrides,
                     "override a config value: section.key=value (repeatable; `tenax config "
                     "show --defaults` lists the keys)");
  command.add_flag("--defaults", out->defaults,
                   "no config file: the built-in defaults (a small debug model on the Brown "
                   "corpus) plus --set");
  command.add_option("--metrics-port", out->metrics_port,
                     "serve the live page (/) and Prometheus metrics (/metrics) on this port");
  command.add_option("--metrics-addr", out->metrics_addr,
                     "address for --metrics-port (default 127.0.0.1; 0.0.0.0 for every "
                     "interface)");
}

Result<TrainCommand> ParseTrainCommand(const std::vector<std::string>& args) {
  TrainCommand cmd;
  CLI::App app{"tenax train"};
  AddTrainOptions(app, &cmd);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(std::string("train: ") + e.what() +
                           " (tenax train accepts --config FILE, --defaults, --set "
                           "section.key=value, --metrics-port P and --metrics-addr A)");
  }
  return cmd;
}

Result<Config> LoadTrainConfig(const TrainCommand& command) {
  if (command.config_path.empty() && !command.defaults) {
    return InvalidArgument(
        "tenax train needs --config FILE (e.g. --config configs/demo.toml; `tenax config show "
        "--defaults` prints every key), or --defaults to train the built-in default model "
        "(debug-small on the Brown corpus) with --set overrides");
  }
  if (!command.config_path.empty() && command.defaults) {
    return InvalidArgument("tenax train: give --config FILE or --defaults, not both");
  }
  if (command.metrics_port < 0 || command.metrics_port > 65535) {
    return InvalidArgument("--metrics-port " + std::to_string(command.metrics_port) +
                           " is invalid: must be a TCP port (1..65535), or 0 for none");
  }
  return LoadConfig(command.config_path, command.overrides);
}

}  // namespace tenax
