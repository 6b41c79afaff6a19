#include "tenax/plan/hardware.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "tenax/core/fs.h"
#include "tenax/core/subprocess.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

namespace stdfs = std::filesystem;

constexpr int kMaxInheritDepth = 8;  // a cycle (a inherits b inherits a) stops here

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
  // An optional number: `fallback` when absent.
  double OptionalNumber(const char* section, const char* key, double lo, double hi, double scale,
                        double fallback, const char* meaning) {
    if (!Find(section, key)) {
      used_[section].insert(key);
      return fallback;
    }
    return Number(section, key, lo, hi, scale, meaning);
  }
  // An optional array of `N`-number rows, each number scaled by `scale[i]`.
  template <size_t N>
  std::vector<std::array<double, N>> Rows(const char* section, const char* key,
                                          const std::array<double, N>& scale, const char* meaning) {
    used_[section].insert(key);
    std::vector<std::array<double, N>> out;
    const toml::node* n = Find(section, key);
    if (!n) return out;
    const toml::array* rows = n->as_array();
    bool ok = rows != nullptr;
    for (size_t r = 0; ok && r < rows->size(); ++r) {
      const toml::array* row = rows->get(r)->as_array();
      if (!row || row->size() != N) {
        ok = false;
        break;
      }
      std::array<double, N> v{};
      for (size_t i = 0; i < N; ++i) {
        auto x = row->get(i)->value<double>();
        if (!x || !(*x > 0)) ok = false;
        v[i] = ok ? *x * scale[i] : 0;
      }
      out.push_back(v);
    }
    if (!ok) {
      errors_->push_back(fmt::format("{}: {} must be an array of [{} positive numbers] rows ({})",
                                     source_, Name(section, key), N, meaning));
      out.clear();
    }
    return out;
  }
  // An optional array of inline tables, one whole layer timed each: { arch = "llama" | "gpt",
  // kernels = "eager" | "compiled", recompute = "none" | "full", dim, heads, kv_heads (Llama),
  // ffn, seq_len, batch, ms }. Shapes must be whole and divide (heads | dim, kv_heads | heads).
  std::vector<LayerMeasurement> Layers(const char* section, const char* key) {
    used_[section].insert(key);
    std::vector<LayerMeasurement> out;
    const toml::node* n = Find(section, key);
    if (!n) return out;
    const std::string where = fmt::format("{}: {}", source_, Name(section, key));
    const toml::array* rows = n->as_array();
    if (!rows) {
      errors_->push_back(where + " must be an array of { arch = ..., ms = ... } tables");
      return out;
    }
    static const std::set<std::string> kKeys = {"arch",    "kernels", "recompute", "tp",
                                                "dim",     "heads",   "kv_heads",  "ffn",
                                                "seq_len", "batch",   "ms"};
    for (size_t i = 0; i < rows->size(); ++i) {
      const toml::table* t = rows->get(i)->as_table();
      const std::string row = fmt::format("{} row {}", where, i + 1);
      if (!t) {
        errors_->push_back(row + " must be a table { arch = ..., ms = ... }");
        continue;
      }
      bool ok = true;
      auto fail = [&](const std::string& what) {
        errors_->push_back(row + ": " + what);
        ok = false;
      };
      for (const auto& [k, v] : *t) {
        if (!kKeys.count(std::string(k.str()))) fail(fmt::format("unknown key {}", k.str()));
      }
      auto word = [&](const char* k, const char* a, const char* b) {
        auto v = t->get(k) ? t->get(k)->value<std::string>() : std::nullopt;
        if (!v || (*v != a && *v != b)) fail(fmt::format("{} must be \"{}\" or \"{}\"", k, a, b));
        return v && *v == b;
      };
      auto whole = [&](const char* k, bool required) -> int64_t {
        const toml::node* v = t->get(k);
        if (!v) {
          if (required) fail(fmt::format("{} is missing", k));
          return 0;
        }
        auto x = v->value<int64_t>();
        if (!x || *x <= 0) fail(fmt::format("{} must be a positive whole number", k));
        return x ? *x : 0;
      };
      auto one_of = [&](const char* k, const std::vector<std::string>& words) {
        auto v = t->get(k) ? t->get(k)->value<std::string>() : std::nullopt;
        if (!v || std::find(words.begin(), words.end(), *v) == words.end()) {
          fail(fmt::format("{} must be one of {}", k, fmt::join(words, ", ")));
          return std::string();
        }
        return *v;
      };
      LayerMeasurement m;
      m.gpt = word("arch", "llama", "gpt");
      m.kernels = one_of("kernels", {"eager", "compiled", "fused"});
      m.recompute = one_of("recompute", {"none", "full", "selective"});
      m.tp = t->get("tp") ? whole("tp", true) : 1;
      m.dim = whole("dim", true);
      m.heads = whole("heads", true);
      m.kv_heads = m.gpt ? m.heads : whole("kv_heads", true);
      m.ffn = whole("ffn", true);
      m.seq_len = whole("seq_len", true);
      m.batch = whole("batch", true);
      auto ms = t->get("ms") ? t->get("ms")->value<double>() : std::nullopt;
      if (!ms || !(*ms > 0)) fail("ms must be a positive number (milliseconds per layer)");
      m.seconds = ms ? *ms * 1e-3 : 0;
      if (ok && (m.heads % m.tp != 0 || m.ffn % m.tp != 0)) {
        fail(fmt::format("tp ({}) must divide heads ({}) and ffn ({})", m.tp, m.heads, m.ffn));
      }
      if (ok && (m.dim % m.heads != 0 || m.heads % m.kv_heads != 0)) {
        fail(
            fmt::format("heads must divide dim and kv_heads divide heads (dim {}, heads {}, "
                        "kv_heads {})",
                        m.dim, m.heads, m.kv_heads));
      }
      if (ok) out.push_back(m);
    }
    return out;
  }
  // An array of positive numbers (`scale` applied), at least two, increasing when `increasing`.
  std::vector<double> List(const std::string& section, const char* key, double scale,
                           bool increasing, const char* meaning) {
    used_[section].insert(key);
    std::vector<double> out;
    const toml::node* n = Find(section.c_str(), key);
    const toml::array* a = n ? n->as_array() : nullptr;
    bool ok = a != nullptr && a->size() >= 2;
    for (size_t i = 0; ok && i < a->size(); ++i) {
      auto x = a->get(i)->value<double>();
      ok = x && *x > 0 && (!increasing || out.empty() || *x * scale > out.back());
      if (ok) out.push_back(*x * scale);
    }
    if (!ok) {
      errors_->push_back(
          fmt::format("{}: {} must be an array of at least two positive{} numbers ({})", source_,
                      Name(section.c_str(), key), increasing ? ", increasing" : "", meaning));
      out.clear();
    }
    return out;
  }
  // Sub-tables of `section` ([attention.flash2], ...), marked as known.
  std::vector<std::string> SubTables(const char* section) {
    std::vector<std::string> names;
    const toml::node* s = root_.get(section);
    const toml::table* t = s ? s->as_table() : nullptr;
    if (!t) return names;
    for (const auto& [key, node] : *t) {
      if (node.as_table()) {
        names.emplace_back(key.str());
        used_[section].insert(names.back());
      }
    }
    return names;
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
        for (const auto& [sub, node2] : *t) {
          const std::string s(sub.str());
          if (!used_[k].count(s)) {
            errors_->push_back(fmt::format("{}: unknown key {}.{}", source_, k, s));
          } else if (const toml::table* t2 = node2.as_table()) {
            for (const auto& [sub2, ignored] : *t2) {
              if (!used_[k + "." + s].count(std::string(sub2.str()))) {
                errors_->push_back(
                    fmt::format("{}: unknown key {}.{}.{}", source_, k, s, sub2.str()));
              }
            }
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
  // `section` may name a sub-table, "attention.flash2".
  const toml::node* Find(const char* section, const char* key) {
    if (!*section) return root_.get(key);
    const toml::table* t = &root_;
    std::string_view rest(section);
    while (t && !rest.empty()) {
      const size_t dot = rest.find('.');
      const toml::node* s = t->get(rest.substr(0, dot));
      t = s ? s->as_table() : nullptr;
      rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
    }
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
  p.sm_count = static_cast<int>(
      r.Number("compute", "sm_count", 1, 1e5, 1, "streaming multiprocessors, for GEMM waves"));
  p.sustained_clock = r.Number("compute", "sustained_clock", 0.05, 1, 1,
                               "fraction of the boost clock held under sustained full load");
  p.gemm_overhead = r.Number("compute", "gemm_overhead_us", 0, 1e4, kUs,
                             "microseconds per GEMM beyond its roofline time");
  p.hbm_bytes = r.Number("memory", "hbm_gib", 0.1, 1e5, kGiB, "GPU memory in GiB");
  p.hbm_bandwidth = r.Number("memory", "hbm_tbytes_per_s", 1e-3, 1e3, kT, "HBM TB/s");
  p.reserved_bytes = r.Number("memory", "reserved_gib", 0, 1e5, kGiB,
                              "GiB not available to tensors: CUDA context, NCCL, fragmentation");
  p.nvlink.bandwidth =
      r.Number("nvlink", "gbytes_per_s", 1e-3, 1e6, kG, "GB/s per GPU per direction inside a node");
  p.nvlink.latency = r.Number("nvlink", "latency_us", 0, 1e6, kUs, "microseconds per hop");
  p.network.bandwidth = r.Number("network", "gbytes_per_s", 1e-3, 1e6, kG,
                                 "GB/s per GPU (one NIC) per direction between nodes");
  p.network.latency = r.Number("network", "latency_us", 0, 1e6, kUs, "microseconds per hop");
  auto frac = [&](const char* key, const char* meaning) {
    return r.Number("efficiency", key, 0, 1, 1, meaning);
  };
  p.eff.matmul = frac("matmul", "bf16 GEMM compute ceiling, fraction of peak_bf16");
  p.eff.fp8_matmul = frac("fp8_matmul", "fp8 GEMM compute ceiling, fraction of peak_fp8");
  p.eff.memory_bound = frac("memory_bound", "fraction of HBM bandwidth reached by streaming");
  p.eff.collective_nvlink = frac("collective_nvlink", "NCCL ring bus bandwidth / NVLink rate");
  p.eff.allreduce_nvlink =
      r.OptionalNumber("efficiency", "allreduce_nvlink", 0, 2, 1, p.eff.collective_nvlink,
                       "all-reduce bus bandwidth / NVLink rate (NVLink SHARP may exceed 1)");
  p.eff.collective_network =
      frac("collective_network", "NCCL bus bandwidth per NIC / network rate");
  p.eff.attention = r.OptionalNumber("efficiency", "attention", 0, 4, 1, 1,
                                     "multiplier on the attention kernel tables");
  p.eff.comm_interference =
      frac("comm_interference", "compute seconds lost per second of hidden communication");
  for (const std::string& kernel : r.SubTables("attention")) {
    const std::string section = "attention." + kernel;
    AttentionTable t;
    t.seq_len = r.List(section, "seq_len", 1, true, "sequence lengths of the measurements");
    t.flops = r.List(section, "tflops", kT, false, "forward+backward causal TFLOP/s");
    if (!t.seq_len.empty() && t.seq_len.size() != t.flops.size()) {
      errors.push_back(
          fmt::format("{}: [{}] seq_len and tflops must have the same length", source, section));
    }
    p.attention[kernel] = std::move(t);
  }
  CalibrationPoints& c = p.calibration;
  c.gemm_bf16 = r.Rows<5>("calibration", "gemm_bf16", {1, 1, 1, 1, kT}, "batch, M, N, K, TFLOP/s");
  c.gemm_fp8 = r.Rows<5>("calibration", "gemm_fp8", {1, 1, 1, 1, kT}, "batch, M, N, K, TFLOP/s");
  c.allreduce_nvlink =
      r.Rows<2>("calibration", "allreduce_nvlink", {1, kG}, "bytes, bus GB/s on 8 GPUs");
  c.allgather_nvlink =
      r.Rows<2>("calibration", "allgather_nvlink", {1, kG}, "bytes, bus GB/s on 8 GPUs");
  c.allreduce_network =
      r.Rows<2>("calibration", "allreduce_network", {1, kG}, "bytes, bus GB/s per NIC");
  c.fp8_linear =
      r.Rows<4>("calibration", "fp8_linear", {1, 1, 1, 1}, "M, K, N, speedup of fp8 over bf16");
  c.layers = r.Layers("calibration", "layers");
  for (const LayerMeasurement& l : c.layers) {
    if (l.tp > p.gpus_per_node) {
      errors.push_back(fmt::format(
          "{}: [calibration] layers: tp {} does not fit in a node of {} GPUs (gpus_per_node)",
          source, l.tp, p.gpus_per_node));
    }
  }
  r.ReportUnknown();
  // Zero speeds would divide by zero in the time model.
  const std::pair<const char*, double> speeds[] = {{"matmul", p.eff.matmul},
                                                   {"memory_bound", p.eff.memory_bound},
                                                   {"collective_nvlink", p.eff.collective_nvlink},
                                                   {"allreduce_nvlink", p.eff.allreduce_nvlink},
                                                   {"collective_network", p.eff.collective_network},
                                                   {"attention", p.eff.attention}};
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
  if (errors.empty() && !p.attention.count("flash2")) {
    errors.push_back(fmt::format(
        "{}: [attention.flash2] is missing (FlashAttention-2 throughput by sequence length: "
        "seq_len = [...], tflops = [...])",
        source));
  }
  if (!errors.empty()) {
    std::string msg = "invalid hardware profile:";
    for (const auto& e : errors) msg += "\n  " + e;
    return InvalidArgument(msg);
  }
  return p;
}

}  // namespace tenax::plan
