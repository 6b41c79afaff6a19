// The table of config keys: one entry per key (its path, type, allowed values, range and a
// one-line help), from which everything else is produced: the reader and the writer
// (config.cc), `tenax config show` (commented TOML), the key list in docs/config.md and the
// range checks. Defaults are not repeated here: they are the field initializers in options.h,
// read through the entry's accessor from a default-constructed Config.
// Adding a key: a field in options.h and one TENAX_KEY line in keys.cc.
// Non-goals: knowing what a model preset contains (config/model_spec.h), checks that need more than
// the config (the world size, the data).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tenax/config/options.h"

namespace tenax {

enum class KeyType { kString, kInt, kUInt, kFloat, kBool };
const char* KeyTypeName(KeyType t);  // "string", "integer", ...

// A key's value: strings, integers (also the non-negative uint64 keys), finite numbers, bools.
using KeyValue = std::variant<std::string, int64_t, double, bool>;

// One bound of a numeric range.
struct KeyBound {
  double value = 0;
  bool inclusive = true;
};

// A check that needs other keys (data.path when data.source = "shards"): `ok` on the final
// config, `allowed` completes "must be ...".
struct KeyCheck {
  std::function<bool(const Config&)> ok;
  std::string allowed;
};

struct KeySpec {
  std::string path;     // "data.synthetic.order"
  std::string section;  // "data.synthetic": everything before the last dot
  std::string name;     // "order"
  KeyType type = KeyType::kString;
  std::string help;  // one line
  // Unset (std::optional fields): the model preset decides; the writer leaves the key out.
  bool optional = false;
  // An integer or the string "auto" (checkpoint.interval).
  bool allows_auto = false;
  std::vector<std::string> allowed;  // strings: the accepted values (empty: any string)
  // Numbers: the range; `special` values are accepted outside it (0 = off, -1 = the rest).
  std::optional<KeyBound> lo, hi;
  std::vector<double> special;
  std::string range_text;  // completes "must be ..." (generated from the bounds when not given)
  std::vector<KeyCheck> checks;

  // nullopt: an unset optional key. "auto" (a string) for an integer-or-auto key set to auto.
  std::function<std::optional<KeyValue>(const Config&)> get;
  // nullopt unsets an optional key. The value has the key's type (or "auto").
  std::function<void(Config&, const std::optional<KeyValue>&)> set;

  // Builders, for the table in keys.cc.
  KeySpec& OneOf(std::vector<std::string> values);
  KeySpec& Range(std::optional<KeyBound> low, std::optional<KeyBound> high, std::string text = "");
  KeySpec& Above(double v, std::string text = "") { return Range(KeyBound{v, false}, {}, text); }
  KeySpec& AtLeast(double v, std::string text = "") { return Range(KeyBound{v, true}, {}, text); }
  KeySpec& Or(double v) {
    special.push_back(v);
    return *this;
  }
  KeySpec& Check(std::function<bool(const Config&)> ok, std::string allowed);
  // The key also accepts "auto", which sets `is_auto(config)` (and leaves the integer alone).
  KeySpec& Auto(std::function<bool&(Config&)> is_auto);

  // "" when `v` is in range, else what it must be ("> 0", "in (0, 1] (...)").
  std::string RangeProblem(double v) const;
  // "an integer >= 1", "one of: cosine, wsd, constant", ...: what the key accepts, for errors
  // and docs.
  std::string Expected() const;
};

// Every key, grouped by section in the order the sections are written.
const std::vector<KeySpec>& ConfigKeys();
// The sections, in order ("job", "model", "data", "data.synthetic", ...).
const std::vector<std::string>& ConfigSections();
const KeySpec* FindKey(const std::string& path);

// The value written in TOML ("cosine", 0.0003, true); for messages and `config show`.
std::string KeyValueToml(const KeyValue& v);

// The closest of `candidates` to `word` (edit distance), or "" when none is close enough to be
// a plausible typo.
std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates);

namespace config_internal {
template <typename T>
struct FieldTraits;
template <>
struct FieldTraits<std::string> {
  static constexpr KeyType kType = KeyType::kString;
};
template <>
struct FieldTraits<int64_t> {
  static constexpr KeyType kType = KeyType::kInt;
};
template <>
struct FieldTraits<uint64_t> {
  static constexpr KeyType kType = KeyType::kUInt;
};
template <>
struct FieldTraits<double> {
  static constexpr KeyType kType = KeyType::kFloat;
};
template <>
struct FieldTraits<bool> {
  static constexpr KeyType kType = KeyType::kBool;
};

template <typename T>
KeyValue ToValue(const T& v) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    return static_cast<int64_t>(v);
  } else {
    return v;
  }
}
template <typename T>
T FromValue(const KeyValue& v) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    return static_cast<uint64_t>(std::get<int64_t>(v));
  } else {
    return std::get<T>(v);
  }
}
template <typename T>
struct Unwrap {
  using type = T;
  static constexpr bool kOptional = false;
};
template <typename T>
struct Unwrap<std::optional<T>> {
  using type = T;
  static constexpr bool kOptional = true;
};

// A key of the field that `field(config)` returns a reference to.
template <typename F>
KeySpec MakeKey(const char* path, F field, const char* help) {
  using Field = std::remove_reference_t<decltype(field(std::declval<Config&>()))>;
  using T = typename Unwrap<Field>::type;
  KeySpec k;
  k.path = path;
  const size_t dot = k.path.rfind('.');
  k.section = k.path.substr(0, dot);
  k.name = k.path.substr(dot + 1);
  k.type = FieldTraits<T>::kType;
  k.help = help;
  k.optional = Unwrap<Field>::kOptional;
  k.get = [field](const Config& c) -> std::optional<KeyValue> {
    const Field& f = field(const_cast<Config&>(c));  // read only
    if constexpr (Unwrap<Field>::kOptional) {
      if (!f) return std::nullopt;
      return ToValue<T>(*f);
    } else {
      return ToValue<T>(f);
    }
  };
  k.set = [field](Config& c, const std::optional<KeyValue>& v) {
    Field& f = field(c);
    if constexpr (Unwrap<Field>::kOptional) {
      if (!v) {
        f.reset();
        return;
      }
      f = FromValue<T>(*v);
    } else {
      if (v) f = FromValue<T>(*v);
    }
  };
  return k;
}
}  // namespace config_internal

// One table entry: the path is written once, as the C++ member path of Config.
#define TENAX_KEY(member_path, help) \
  ::tenax::config_internal::MakeKey( \
      #member_path, [](::tenax::Config & c) -> auto& { return c.member_path; }, help)

}  // namespace tenax
