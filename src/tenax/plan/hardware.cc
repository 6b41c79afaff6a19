#include "tenax/plan/hardware.h"

#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "tenax/core/fs.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

namespace stdfs = std::filesystem;

constexpr int kMaxInheritDepth = 8;  // a cycle (a inherits b inherits a) stops here

std::string ExecutableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return ParentDir(buf);
}

bool LooksLikePath(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.compare(s.size() - 5, 5, ".toml") == 0);
}

// Child keys replace parent keys; tables merge key by key so a child may override one field of
// [efficiency] and keep the rest.
void MergeInto(toml::table& base, const toml::table& child) {
  for (const auto& [key, node] : child) {
    if (const toml::table* ct = node.as_table()) {
      if (toml::table* bt = base[key].as_table()) {
        MergeInto(*bt, *ct);
        continue;
      }
    }
    base.insert_or_assign(key, node);
  }
}

Result<std::string> FindProfile(const std::string& name, const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) {
    const std::string p = JoinPath(d, name + ".toml");
    if (LocalFs().Exists(p)) return p;
  }
  std::string names;
  for (const auto& n : AvailableHardwareProfiles(dirs)) names += (names.empty() ? "" : ", ") + n;
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  return NotFound(fmt::format(
      "hardware profile '{}' not found (searched {}); known profiles: {}. Pass a path to a TOML "
      "file, or copy configs/hardware/h100-sxm.toml and edit it",
      name, searched.empty() ? "nothing" : searched, names.empty() ? "none" : names));
}

// Reads `text` and everything it inherits into one table; `chain` collects the files read.
Result<toml::table> ReadMerged(std::string_view text, const std::string& source,
                               const std::vector<std::string>& dirs, int depth,
                               std::string* chain) {
  if (depth > kMaxInheritDepth) {
    return InvalidArgument(
        fmt::format("{}: 'inherits' nests more than {} deep (a cycle?)", source, kMaxInheritDepth));
  }
  toml::table t;
  try {
    t = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(fmt::format("{}:{}:{}: {}", source, e.source().begin.line,
                                       e.source().begin.column, e.description()));
  }
  *chain += (chain->empty() ? "" : " <- ") + source;
  const toml::node* inh = t.get("inherits");
  if (!inh) return t;
  auto parent_name = inh->value_exact<std::string>();
  if (!parent_name) return InvalidArgument(source + ": inherits must be a profile name (a string)");
  std::vector<std::string> parent_dirs = {ParentDir(source)};
  parent_dirs.insert(parent_dirs.end(), dirs.begin(), dirs.end());
  std::string parent_path = *parent_name;
  if (!LooksLikePath(parent_path)) {
    TENAX_ASSIGN_OR_RETURN(parent_path, FindProfile(*parent_name, parent_dirs));
  }
  auto parent_text = LocalFs().ReadFile(parent_path);
  if (!parent_text.ok()) {
    return parent_text.status().WithContext(source + ": inherits = \"" + *parent_name + "\"");
  }
  TENAX_ASSIGN_OR_RETURN(toml::table merged,
                         ReadMerged(*parent_text, parent_path, dirs, depth + 1, chain));
  t.erase("inherits");
  MergeInto(merged, t);
  return merged;
}

// Reads the fields of one [section], collecting every error so a bad file is fixed in one pass.
class Reader {
 public:
  Reader(const toml::table& root, std::string source, std::vector<std::string>* errors)
      : root_(root), source_(std::move(source)), errors_(errors) {}

  // A number in [lo, hi] (unit conversion by `scale`), required.
  double Number(const char* section, const char* key, double lo, double hi, double scale,
                const char* meaning) {
    used_[section].insert(key);
    const toml::node* n = Find(section, key);
    if (!n) {
      errors_->push_back(
          fmt::format("{}: {} is missing ({})", source_, Name(section, key), meaning));
      return 0;
    }
    auto v = n->value<double>();
    if (!v || !(*v >= lo && *v <= hi)) {
      errors_->push_back(fmt::format("{}: {} must be a number in [{}, {}] ({})", source_,
                                     Name(section, key), lo, hi, meaning));
      return 0;
    }
    return *v * scale;
  }
  std::string String(const char* key, bool required, const char* meaning) {
    used_[""].insert(key);
    const toml::node* n = root_.get(key);
    if (!n) {
      if (required)
        errors_->push_back(fmt::format("{}: {} is missing ({})", source_, key, meaning));
      return "";
    }
    auto v = n->value_exact<std::string>();
    if (!v) errors_->push_back(fmt::format("{}: {} must be a string ({})", source_, key, meaning));
    return v ? *v : "";
  }
  void ReportUnknown() {
    for (const auto& [key, node] : root_) {
      const std::string k(key.str());
      if (const toml::table* t = node.as_table()) {
        if (!used_.count(k)) {
          errors_->push_back(fmt::format("{}: unknown section [{}]", source_, k));
          continue;
        }
        for (const auto& [sub, ignored] : *t) {
          if (!used_[k].count(std::string(sub.str()))) {
            errors_->push_back(fmt::format("{}: unknown key {}.{}", source_, k, sub.str()));
          }
        }
      } else if (!used_[""].count(k)) {
        errors_->push_back(fmt::format("{}: unknown key {}", source_, k));
      }
    }
  }

 private:
  static std::string Name(const char* section, const char* key) {
    return *section ? fmt::format("[{}] {}", section, key) : std::string(key);
  }
  const toml::node* Find(const char* section, const char* key) {
    if (!*section) return root_.get(key);
    const toml::node* s = root_.get(section);
    const toml::table* t = s ? s->as_table() : nullptr;
    return t ? t->get(key) : nullptr;
  }

  const toml::table& root_;
  std::string source_;
  std::vector<std::string>* errors_;
  std::map<std::string, std::set<std::string>> used_;
};

}  // namespace

std::vector<std::string> HardwareSearchDirs() {
  std::vector<std::string> dirs = {"configs/hardware"};
  const std::string exe = ExecutableDir();
  if (!exe.empty()) {
    dirs.push_back(JoinPath(exe, "configs/hardware"));
    dirs.push_back(JoinPath(ParentDir(exe), "configs/hardware"));
  }
  if (const char* src = std::getenv("TENAX_SOURCE_DIR"); src && *src) {
    dirs.push_back(JoinPath(src, "configs/hardware"));
  }
  return dirs;
}

std::vector<std::string> AvailableHardwareProfiles(const std::vector<std::string>& dirs) {
  std::set<std::string> names;
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".toml") names.insert(e.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

Result<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path) {
  return LoadHardwareProfile(name_or_path, HardwareSearchDirs());
}

Result<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path,
                                            const std::vector<std::string>& dirs) {
  std::string path = name_or_path;
  if (!LooksLikePath(name_or_path)) {
    TENAX_ASSIGN_OR_RETURN(path, FindProfile(name_or_path, dirs));
  }
  auto text = LocalFs().ReadFile(path);
  if (!text.ok()) return text.status().WithContext("reading hardware profile");
  return ParseHardwareProfile(*text, path, dirs);
}

Result<HardwareProfile> ParseHardwareProfile(std::string_view text, const std::string& source,
                                             const std::vector<std::string>& dirs) {
  HardwareProfile p;
  TENAX_ASSIGN_OR_RETURN(toml::table t, ReadMerged(text, source, dirs, 0, &p.source));
  std::vector<std::string> errors;
  Reader r(t, source, &errors);
  p.name = r.String("name", true, "the profile's short name, e.g. \"h100-sxm\"");
  p.description = r.String("description", false, "");
  p.gpus_per_node = static_cast<int>(
      r.Number("", "gpus_per_node", 1, 1024, 1, "GPUs that share one NVLink domain"));
  constexpr double kT = 1e12, kG = 1e9, kUs = 1e-6;
  p.peak_bf16 = r.Number("compute", "peak_bf16_tflops", 1e-3, 1e6, kT, "dense bf16 TFLOP/s");
  p.peak_fp8 = r.Number("compute", "peak_fp8_tflops", 0, 1e6, kT, "dense fp8 TFLOP/s; 0 = none");
  p.hbm_bytes = r.Number("memory", "hbm_gib", 0.1, 1e5, kGiB, "GPU memory in GiB");
  p.hbm_bandwidth = r.Number("memory", "hbm_tbytes_per_s", 1e-3, 1e3, kT, "HBM TB/s");
  p.reserved_bytes = r.Number("memory", "reserved_gib", 0, 1e5, kGiB,
                              "GiB not available to tensors: CUDA context, NCCL, fragmentation");
  p.nvlink.bandwidth =
      r.Number("nvlink", "gbytes_per_s", 1e-3, 1e6, kG, "GB/s per GPU per direction inside a node");
  p.nvlink.latency = r.Number("nvlink", "latency_us", 0, 1e6, kUs, "microseconds per hop");
  p.network.bandwidth = r.Number("network", "gbytes_per_s", 1e-3, 1e6, kG,
                                 "GB/s per GPU per direction between nodes");
  p.network.latency = r.Number("network", "latency_us", 0, 1e6, kUs, "microseconds per hop");
  auto frac = [&](const char* key, const char* meaning) {
    return r.Number("efficiency", key, 0, 1, 1, meaning);
  };
  p.eff.matmul = frac("matmul", "fraction of peak_bf16 reached by large GEMMs");
  p.eff.matmul_half_intensity = r.Number("efficiency", "matmul_half_intensity", 0, 1e6, 1,
                                         "FLOP/byte at which a GEMM reaches half of matmul");
  p.eff.fp8_matmul = frac("fp8_matmul", "fraction of peak_fp8 reached by large fp8 GEMMs");
  p.eff.attention = frac("attention", "fraction of peak_bf16 reached by flash attention");
  p.eff.memory_bound = frac("memory_bound", "fraction of HBM bandwidth reached by elementwise ops");
  p.eff.collective_nvlink = frac("collective_nvlink", "NCCL bus bandwidth / NVLink bandwidth");
  p.eff.collective_network = frac("collective_network", "NCCL bus bandwidth / network bandwidth");
  p.eff.tp_overlap = frac("tp_overlap", "fraction of tensor-parallel traffic hidden");
  p.eff.dp_overlap = frac("dp_overlap", "fraction of data-parallel traffic hidden");
  p.eff.pp_overlap = frac("pp_overlap", "fraction of steady-state pipeline sends hidden");
  p.eff.comm_interference =
      frac("comm_interference", "compute seconds lost per second of hidden communication");
  r.ReportUnknown();
  // Zero speeds would divide by zero in the time model; overlaps may be 0.
  const std::pair<const char*, double> speeds[] = {
      {"matmul", p.eff.matmul},
      {"attention", p.eff.attention},
      {"memory_bound", p.eff.memory_bound},
      {"collective_nvlink", p.eff.collective_nvlink},
      {"collective_network", p.eff.collective_network}};
  for (const auto& [key, v] : speeds) {
    if (errors.empty() && v <= 0) {
      errors.push_back(fmt::format("{}: [efficiency] {} must be > 0 (a speed)", source, key));
    }
  }
  if (errors.empty() && p.peak_fp8 > 0 && p.eff.fp8_matmul <= 0) {
    errors.push_back(fmt::format(
        "{}: [efficiency] fp8_matmul must be > 0 when [compute] peak_fp8_tflops > 0", source));
  }
  if (errors.empty() && p.reserved_bytes >= p.hbm_bytes) {
    errors.push_back(fmt::format("{}: [memory] reserved_gib must be below hbm_gib", source));
  }
  if (!errors.empty()) {
    std::string msg = "invalid hardware profile:";
    for (const auto& e : errors) msg += "\n  " + e;
    return InvalidArgument(msg);
  }
  return p;
}

}  // namespace tenax::plan
