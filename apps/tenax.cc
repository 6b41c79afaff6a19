// tenax: the command-line entry point, and only that: each module declares its own subcommands
// and flags (core/cli.h); main builds the app, parses, runs the subcommand parsed and maps its
// result to an exit code (docs/exit_codes.md). No training logic lives here.
// This executable does not link libtorch: `launch`, `plan`, `simulate`, `model`, `prepare` and
// `report` start in milliseconds. The libtorch subcommands (train, eval, import-hf, export-hf,
// generate) live in tenax-torch beside it (apps/torch/); for those this process replaces itself
// with tenax-torch (same pid, same arguments, so a launcher's parent-death signal and pipes carry
// over).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tenax/config/cli.h"
#include "tenax/config/keys.h"  // ClosestMatch
#include "tenax/core/cli.h"
#include "tenax/core/format.h"
#include "tenax/core/log.h"
#include "tenax/data/cli.h"
#include "tenax/launch/cli.h"
#include "tenax/plan/cli.h"
#include "tenax/protocol/protocol.h"
#include "tenax/report/cli.h"

namespace tenax {
namespace {

// The subcommands tenax-torch runs, with their one-line help.
constexpr std::pair<const char*, const char*> kTorchCommands[] = {
    {"train", "train a model from a TOML config"},
    {"eval", "validation loss of a checkpoint, as one JSON line"},
    {"import-hf", "Hugging Face Llama folder -> tenax checkpoint"},
    {"export-hf", "tenax checkpoint -> Hugging Face Llama folder"},
    {"generate", "sample text from a checkpoint or a Hugging Face folder"},
};

// Replaces this process with tenax-torch (beside this executable) running the same arguments.
int ExecTorch(char** argv) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string exe = "tenax-torch";
  if (n > 0) {
    self[n] = '\0';
    const std::string dir(self);
    exe = dir.substr(0, dir.rfind('/') + 1) + "tenax-torch";
  }
  ::execv(exe.c_str(), argv);
  log::Error("cannot run {} for `tenax {}`: {}; it is built beside tenax by scripts/build", exe,
             argv[1], std::strerror(errno));
  return protocol::ToInt(protocol::ExitCode::kNotFound);
}

int ExitCode(const Status& st) {
  if (st.ok()) return 0;
  log::Error("{}", st.message());
  return protocol::ToInt(protocol::FromStatus(st));
}

}  // namespace
}  // namespace tenax

int main(int argc, char** argv) {
  using namespace tenax;
  if (argc > 1) {
    for (const auto& [name, help] : kTorchCommands) {
      if (std::strcmp(argv[1], name) == 0) return ExecTorch(argv);
    }
  }
  CLI::App app{"tenax: fault-tolerant Llama 3 pretraining"};
  app.name("tenax");
  app.require_subcommand(1);
  app.set_version_flag("--version", "tenax 0.1.0");
  for (const auto& [name, help] : kTorchCommands) {
    app.add_subcommand(name, help)->allow_extras();  // listed in --help; run by tenax-torch
  }
  cli::Commands commands;
  AddCommands(app, commands);  // model, config (config/cli.h)
  data::AddCommands(app, commands);
  launch::AddCommands(app, commands);
  plan::AddCommands(app, commands);
  report::AddCommands(app, commands);

  // A word where a subcommand belongs that is none: named, with the closest one (CLI11 would say
  // "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string close = ClosestMatch(argv[1], names);
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      log::Error("unknown command '{}'{}; the commands are: {} (tenax --help)", argv[1],
                 close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close), list);
      return protocol::ToInt(protocol::ExitCode::kInvalidArgument);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : protocol::ToInt(protocol::ExitCode::kInvalidArgument);
  }
  const cli::Runner* run = commands.Parsed();
  if (run == nullptr) return protocol::ToInt(protocol::ExitCode::kInvalidArgument);  // unreachable
  Result<int> rc = Internal("not run");
  try {
    rc = (*run)();
  } catch (const std::exception& e) {
    rc = Internal(e.what());
  }
  return rc.ok() ? *rc : ExitCode(rc.status());
}
