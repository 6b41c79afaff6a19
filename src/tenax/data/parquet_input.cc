#include "tenax/data/parquet_input.h"

#include <nlohmann/json.hpp>

#include "tenax/core/subprocess.h"

namespace tenax::data {
namespace {

constexpr const char* kHelp =
    "Parquet inputs are read by the helper program tenax-parquet, built next to tenax when "
    "pyarrow (Apache Arrow's C++ library) is in the build's Python: run ./scripts/setup (it "
    "installs pyarrow into .deps/venv) and ./scripts/build, or set TENAX_PARQUET=/path/to/"
    "tenax-parquet; or convert the files to JSON Lines";

// Runs the helper; its stdout, or an error naming the file (and the helper's reason).
Result<std::string> RunHelper(const std::vector<std::string>& args, const std::string& path) {
  TENAX_ASSIGN_OR_RETURN(std::string helper, FindParquetHelper());
  std::vector<std::string> argv = {helper};
  argv.insert(argv.end(), args.begin(), args.end());
  TENAX_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(argv, ""));
  if (r.exit_code == 0) return std::move(r.out);
  std::string why = r.err;
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  if (why.empty()) why = "tenax-parquet exited with code " + std::to_string(r.exit_code);
  return DataError(path + ": " + why);
}

}  // namespace

Result<std::string> FindParquetHelper() {
  return FindHelperProgram("tenax-parquet", "TENAX_PARQUET", kHelp);
}

Result<ParquetInfo> InspectParquet(const std::string& path, const std::string& column) {
  TENAX_ASSIGN_OR_RETURN(std::string out, RunHelper({"inspect", path, column}, path));
  ParquetInfo info;
  try {
    const nlohmann::json j = nlohmann::json::parse(out);
    info.rows = j.at("rows").get<int64_t>();
    for (const auto& g : j.at("row_groups")) {
      info.group_rows.push_back(g.at("rows").get<int64_t>());
      info.group_bytes.push_back(g.at("bytes").get<int64_t>());
    }
    info.type = j.at("type").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return Internal(path + ": tenax-parquet inspect printed what tenax cannot read (" + e.what() +
                    "): " + out.substr(0, 200));
  }
  return info;
}

Result<std::vector<std::string>> ReadParquetRowGroup(const std::string& path,
                                                     const std::string& column, int group,
                                                     int64_t* nulls) {
  TENAX_ASSIGN_OR_RETURN(std::string out,
                         RunHelper({"read", path, column, std::to_string(group)}, path));
  const auto truncated = [&] {
    return Internal(path + ": tenax-parquet read printed a truncated record for row group " +
                    std::to_string(group) + " of column \"" + column + "\"");
  };
  std::vector<std::string> values;
  for (size_t pos = 0; pos < out.size();) {
    if (out.size() - pos < 8) return truncated();
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(out[pos + i])} << (8 * i);
    pos += 8;
    if (n == UINT64_MAX) {
      ++*nulls;
      continue;
    }
    if (n > out.size() - pos) return truncated();
    values.emplace_back(out, pos, n);
    pos += n;
  }
  return values;
}

}  // namespace tenax::data
