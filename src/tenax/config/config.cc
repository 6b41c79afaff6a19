#include "tenax/config/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "tenax/config/keys.h"
#include "tenax/core/fs.h"

namespace tenax {
namespace {

std::string Describe(const toml::node& n) {
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  if (auto str = n.value_exact<std::string>()) return "\"" + *str + "\"";
  std::ostringstream os;
  n.visit([&os](const auto& v) { os << v; });
  return os.str();
}

std::string Describe(const KeyValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return "\"" + x + "\"";
        } else {
          return fmt::format("{}", x);
        }
      },
      v);
}

// What a key's TOML type must be, for a value of the wrong type.
std::string TypeExpected(const KeySpec& k) {
  switch (k.type) {
    case KeyType::kString:
      return k.Expected();
    case KeyType::kInt:
      return k.allows_auto ? "an integer or \"auto\"" : "an integer";
    case KeyType::kUInt:
      return "a non-negative integer";
    case KeyType::kFloat:
      return "a finite number";
    case KeyType::kBool:
      return "true or false";
  }
  return "";
}

std::string Join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// One mistake and where it came from ("t.toml:3", "--set training.steps=0"; empty: the
// combination of keys).
struct Problem {
  std::string where;
  std::string text;
};

// Reads a TOML tree against the key table, collecting every mistake so that one run reports
// them all.
class Reader {
 public:
  Reader(std::string file, const std::map<std::string, std::string>* set_by)
      : file_(std::move(file)), set_by_(set_by) {}

  void Read(const toml::table& root, Config* c) {
    Walk(root, "", c);
    for (const KeySpec& k : ConfigKeys()) Validate(k, *c);
  }
  const std::vector<Problem>& problems() const { return problems_; }

 private:
  // Where the value at `path` came from: the --set that wrote it, or its line in the file.
  std::string Where(const std::string& path, const toml::node* n) const {
    if (auto it = set_by_->find(path); it != set_by_->end()) return "--set " + it->second;
    if (n != nullptr && n->source().begin.line > 0) {
      return fmt::format("{}:{}", file_, n->source().begin.line);
    }
    return file_;
  }
  void Add(const std::string& path, const toml::node* n, std::string text) {
    problems_.push_back({Where(path, n), std::move(text)});
  }

  static bool IsSection(const std::string& path) {
    const auto& s = ConfigSections();
    return std::find(s.begin(), s.end(), path) != s.end();
  }

  void Walk(const toml::table& table, const std::string& prefix, Config* c) {
    for (const auto& [key, node] : table) {
      const std::string path =
          prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      if (const KeySpec* k = FindKey(path)) {
        ReadKey(*k, node, c);
      } else if (IsSection(path)) {
        if (const toml::table* t = node.as_table()) {
          seen_.insert(path);
          Walk(*t, path, c);
        } else {
          Add(path, &node, fmt::format("[{}] must be a table", path));
        }
      } else {
        Unknown(path, prefix, node);
      }
    }
  }

  void Unknown(const std::string& path, const std::string& section, const toml::node& node) {
    const std::string name = path.substr(path.rfind('.') + 1);
    if (section.empty() && node.is_table()) {
      const std::string close = ClosestMatch(path, ConfigSections());
      Add(path, &node,
          fmt::format("unknown section [{}]; {}allowed sections: {}", path,
                      close.empty() ? "" : fmt::format("did you mean [{}]? ", close),
                      Join(ConfigSections())));
      return;
    }
    std::vector<std::string> names, paths;
    std::string elsewhere;
    for (const KeySpec& k : ConfigKeys()) {
      paths.push_back(k.path);
      if (k.section == section) names.push_back(k.name);
      if (k.name == name && elsewhere.empty()) elsewhere = k.path;  // training.lr: optimizer.lr
    }
    std::string close = ClosestMatch(name, names);
    close = !close.empty()       ? section + "." + close
            : !elsewhere.empty() ? elsewhere
                                 : ClosestMatch(path, paths);
    std::string text = fmt::format("unknown key '{}'", path);
    if (!close.empty()) text += fmt::format("; did you mean '{}'?", close);
    if (section.empty()) {
      text += " (keys belong in a [section])";
    } else {
      text += fmt::format(" (keys in [{}]: {})", section, Join(names));
    }
    Add(path, &node, text);
  }

  void ReadKey(const KeySpec& k, const toml::node& n, Config* c) {
    const auto wrong_type = [&] {
      Add(k.path, &n,
          fmt::format("{} = {} is invalid: expected {}", k.path, Describe(n), TypeExpected(k)));
    };
    std::optional<KeyValue> v;
    switch (k.type) {
      case KeyType::kString:
        if (auto s = n.value_exact<std::string>()) {
          if (!k.allowed.empty() &&
              std::find(k.allowed.begin(), k.allowed.end(), *s) == k.allowed.end()) {
            const std::string close = ClosestMatch(*s, k.allowed);
            Add(k.path, &n,
                fmt::format("{} = \"{}\" is invalid: expected {}{}", k.path, *s, k.Expected(),
                            close.empty() ? "" : fmt::format("; did you mean \"{}\"?", close)));
            return;
          }
          v = *s;
        }
        break;
      case KeyType::kInt:
        if (auto i = n.value_exact<int64_t>()) {
          v = *i;
        } else if (auto s = n.value_exact<std::string>(); s && k.allows_auto && *s == "auto") {
          v = *s;
        }
        break;
      case KeyType::kUInt:
        if (auto i = n.value_exact<int64_t>(); i && *i >= 0) v = *i;
        break;
      case KeyType::kFloat:
        // Integers are accepted as numbers; inf and nan (valid TOML) are never a sensible
        // setting.
        if (auto d = n.value<double>(); d && std::isfinite(*d)) v = *d;
        break;
      case KeyType::kBool:
        if (auto b = n.value_exact<bool>()) v = *b;
        break;
    }
    if (!v) {
      wrong_type();
      return;
    }
    k.set(*c, v);
    nodes_[k.path] = &n;
  }

  void Validate(const KeySpec& k, const Config& c) {
    const std::optional<KeyValue> v = k.get(c);
    const toml::node* n = nodes_.count(k.path) ? nodes_[k.path] : nullptr;
    if (v && (k.lo || k.hi)) {
      std::optional<double> x;
      if (const auto* i = std::get_if<int64_t>(&*v)) x = static_cast<double>(*i);
      if (const auto* d = std::get_if<double>(&*v)) x = *d;
      if (x) {
        if (std::string must = k.RangeProblem(*x); !must.empty()) {
          Add(k.path, n, fmt::format("{} = {} is invalid: must be {}", k.path, Describe(*v), must));
          return;
        }
      }
    }
    for (const KeyCheck& check : k.checks) {
      if (!check.ok(c)) {
        Add(k.path, n,
            fmt::format("{} = {} is invalid: must be {}", k.path,
                        v ? Describe(*v) : std::string("(unset)"), check.allowed));
        return;
      }
    }
  }

  const std::string file_;
  const std::map<std::string, std::string>* set_by_;
  std::vector<Problem> problems_;
  std::set<std::string> seen_;
  std::map<std::string, const toml::node*> nodes_;
};

// Applies "a.b.c=value": the value is read as a TOML value when it parses as one (numbers, bools,
// quoted strings, arrays) and as a bare string otherwise, so `--set data.source=synthetic` works.
// Returns the key's path.
Result<std::string> ApplyOverride(toml::table* root, const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--set " + spec + ": expected section.key=value");
  }
  std::string path = spec.substr(0, eq);
  std::string value = spec.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.size() < 2) {
    std::string hint;
    for (const KeySpec& k : ConfigKeys()) {
      if (k.name == path) {
        hint = fmt::format(" (did you mean {}={}?)", k.path, value);
        break;
      }
    }
    return InvalidArgument("--set " + spec +
                           ": the key must name its section, e.g. training.steps" + hint);
  }
  toml::table* t = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* n = t->get(parts[i]);
    if (!n) {
      t->insert(parts[i], toml::table{});
      n = t->get(parts[i]);
    }
    t = n->as_table();
    if (!t) return InvalidArgument("--set " + spec + ": '" + parts[i] + "' is not a table");
  }
  try {
    toml::table parsed = toml::parse("v = " + value);
    t->insert_or_assign(parts.back(), *parsed.get("v"));
  } catch (const toml::parse_error&) {
    t->insert_or_assign(parts.back(), value);
  }
  return path;
}

// `text` as "# " lines of at most 100 columns, broken at spaces.
std::string Comment(const std::string& text) {
  std::string out, line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > 98) {
      out += "# " + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + "# " + line + "\n";
}

std::string DefaultText(const KeySpec& k) {
  static const Config defaults;
  const std::optional<KeyValue> v = k.get(defaults);
  return v ? KeyValueToml(*v) : "unset: the preset's";
}

}  // namespace

Result<Config> ParseConfig(std::string_view text, const std::vector<std::string>& overrides,
                           const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return InvalidArgument(fmt::format("{}:{}:{}: TOML syntax error: {}", source_name, where.line,
                                       where.column, e.description()));
  }
  std::map<std::string, std::string> set_by;  // key path -> the --set that wrote it
  for (const std::string& o : overrides) {
    TENAX_ASSIGN_OR_RETURN(std::string path, ApplyOverride(&root, o));
    set_by[path] = o;
  }
  Config config;
  Reader reader(source_name, &set_by);
  reader.Read(root, &config);
  const std::vector<Problem>& problems = reader.problems();
  if (!problems.empty()) {
    size_t from_set = 0;
    for (const Problem& p : problems) from_set += p.where.rfind("--set ", 0) == 0;
    const std::string subject = from_set == problems.size() ? "--set"
                                : from_set == 0             ? source_name
                                                            : source_name + " with --set";
    std::string msg = fmt::format("{} has {} problem{}:", subject, problems.size(),
                                  problems.size() == 1 ? "" : "s");
    for (const Problem& p : problems) {
      msg += "\n  - " + (p.where.empty() ? "" : p.where + ": ") + p.text;
    }
    return InvalidArgument(msg);
  }
  return config;
}

Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  if (!path.empty()) {
    auto r = LocalFs().ReadFile(path);
    if (!r.ok()) return r.status().WithContext("reading config");
    text = std::move(r).value();
  }
  return ParseConfig(text, overrides, path.empty() ? "<defaults>" : path);
}

std::string ConfigToToml(const Config& c) {
  toml::table root;
  for (const KeySpec& k : ConfigKeys()) {
    const std::optional<KeyValue> v = k.get(c);
    if (!v) continue;
    toml::table* t = &root;
    std::stringstream ss(k.section);
    for (std::string part; std::getline(ss, part, '.');) {
      if (!t->contains(part)) t->insert(part, toml::table{});
      t = t->get(part)->as_table();
    }
    std::visit([&](const auto& x) { t->insert_or_assign(k.name, x); }, *v);
  }
  std::ostringstream os;
  os << root << "\n";
  return os.str();
}

std::string ConfigShowToml(const Config& c, const std::string& title) {
  std::string out = "# " + title + "\n";
  out +=
      "# Every key with what it accepts and its default; unset keys are comments.\n"
      "# `tenax config show --defaults` prints the defaults; docs/config.md lists the keys.\n";
  std::string section;
  for (const KeySpec& k : ConfigKeys()) {
    if (k.section != section) {
      section = k.section;
      out += "\n[" + section + "]\n";
    }
    const std::optional<KeyValue> v = k.get(c);
    const std::string def = DefaultText(k);
    out += Comment(fmt::format("{} ({}; default {})", k.help, k.Expected(), def));
    if (!v) {
      out += fmt::format("# {} =\n", k.name);
      continue;
    }
    const std::string value = KeyValueToml(*v);
    out += fmt::format("{} = {}{}\n", k.name, value,
                       value == def ? "" : fmt::format("  # default {}", def));
  }
  return out;
}

std::string ConfigKeysMarkdown() {
  std::string out;
  std::string section;
  for (const KeySpec& k : ConfigKeys()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n### [{}]\n\n| key | accepts | default | meaning |\n|---|---|---|---|\n",
                         section);
    }
    std::string accepts = k.Expected();
    for (const KeyCheck& check : k.checks) accepts += "; " + check.allowed;
    auto escape = [](std::string s) {
      for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
      return s;
    };
    out += fmt::format("| `{}` | {} | `{}` | {} |\n", k.name, escape(accepts), DefaultText(k),
                       escape(k.help));
  }
  return out;
}

RunPaths RunPathsOf(const Config& config) {
  return RunPaths::Of(config.job.dump_folder, config.job.name, config.checkpoint.folder);
}

}  // namespace tenax
