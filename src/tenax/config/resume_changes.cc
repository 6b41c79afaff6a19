#include "tenax/config/resume_changes.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <sstream>

#include "tenax/config/config.h"

namespace tenax {
namespace {

std::string Show(const toml::node* n) {
  if (n == nullptr) return "(unset)";
  if (auto s = n->value_exact<std::string>()) return "\"" + *s + "\"";
  // The shortest form that reads back the same (0.0003, not 0.00029999999999999997).
  if (auto d = n->value_exact<double>()) return fmt::format("{}", *d);
  std::ostringstream os;
  n->visit([&os](const auto& v) { os << v; });
  return os.str();
}

}  // namespace

Result<std::vector<std::string>> TrajectoryChanges(const std::string& saved_toml,
                                                   const Config& now) {
  TENAX_ASSIGN_OR_RETURN(Config saved, ParseConfig(saved_toml, {}, "the checkpoint's config"));
  toml::table before, after;
  try {
    before = toml::parse(ConfigToToml(saved));
    after = toml::parse(ConfigToToml(now));
  } catch (const toml::parse_error& e) {
    return Internal(std::string("ConfigToToml wrote TOML that does not parse: ") +
                    std::string(e.description()));
  }
  std::vector<std::string> out;
  auto compare = [&](const std::string& section, const std::string& key) {
    const toml::node* b = before.at_path(section + "." + key).node();
    const toml::node* a = after.at_path(section + "." + key).node();
    const std::string sb = Show(b), sa = Show(a);
    if (sb != sa) out.push_back(section + "." + key + ": " + sb + " -> " + sa);
  };
  for (const char* section : {"optimizer", "lr_scheduler"}) {
    std::vector<std::string> keys;
    for (const toml::table* t :
         {before.get_as<toml::table>(section), after.get_as<toml::table>(section)}) {
      if (t == nullptr) continue;
      for (const auto& [k, v] : *t) {
        const std::string key(k.str());
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      }
    }
    for (const auto& key : keys) compare(section, key);
  }
  for (const char* key : {"steps", "max_norm", "seq_len"}) compare("training", key);
  compare("job", "seed");
  return out;
}

}  // namespace tenax
