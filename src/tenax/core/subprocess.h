// Running a helper program with pipes. The data layer needs it for tenax-spm, the process that
// hosts sentencepiece (Debian's libsentencepiece uses protobuf-lite, libtorch full protobuf, and
// the two crash when loaded into one process; see CMakeLists.txt), and for tenax-parquet, the one
// that hosts Apache Arrow (data/parquet_input.h).
// Non-goals: shells, timeouts, streaming output; a general process library.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tenax/core/status.h"

namespace tenax {

struct ProcessResult {
  int exit_code = 0;  // the program's exit status; 128 + N when signal N killed it
  std::string out;    // everything it wrote to stdout
  std::string err;    // everything it wrote to stderr
};

// Starts argv[0] (searched in PATH when it has no '/'), writes `input` to its stdin, closes it,
// and collects stdout and stderr until it exits. Writing and reading are interleaved with poll()
// so large inputs and outputs cannot deadlock on full pipes. SIGPIPE is blocked in the calling
// thread while writing, so a child that exits early surfaces as an error, not a dead process.
// Returns IoError only when the program could not be run; a non-zero exit is a result.
// Thread safety: safe to call from several threads (posix_spawn, per-call pipes).
Result<ProcessResult> RunProcess(const std::vector<std::string>& argv, std::string_view input);

// The folder of the running executable (/proc/self/exe), or "" when it cannot be read.
std::string ExecutableDir();

// A helper program `name` (tenax-spm, tenax-parquet): the path in environment variable `env_var`
// when set (an error if it is not executable), else beside the running program (build/tenax) or
// one level up (build/tests/*_test), else in PATH. NotFound ends with `help` (how to build it).
Result<std::string> FindHelperProgram(const std::string& name, const char* env_var,
                                      const std::string& help);

}  // namespace tenax
