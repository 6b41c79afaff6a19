// Test helper (header only, never linked into tenax): a parser of the Prometheus text exposition
// format 0.0.4 that enforces the rules a scraper relies on, written from the format's
// specification rather than from live.cc, so that it checks the exporter instead of mirroring it:
//   - a family's HELP and TYPE come before its first sample, at most once each;
//   - a family's samples are contiguous (no family appears twice);
//   - metric and label names match [a-zA-Z_:][a-zA-Z0-9_:]* / [a-zA-Z_][a-zA-Z0-9_]*;
//   - counter families end in _total (the OpenMetrics-compatible convention);
//   - values are floats, or NaN, +Inf, -Inf.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace tenax::report::testing {

struct PromSample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string type;  // counter | gauge | ...
  std::string help;
  std::vector<PromSample> samples;
};

// Fills `out` (family name -> family); returns "" or the first rule broken, with its line.
inline std::string ParsePrometheus(const std::string& text,
                                   std::map<std::string, PromFamily>* out) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  std::istringstream in(text);
  std::string current;  // the family whose samples are being read
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const std::string where = "line " + std::to_string(n) + " '" + line + "': ";
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line.substr(1));
      std::string kind, name;
      words >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") continue;  // a plain comment
      if (!std::regex_match(name, kName)) return where + "bad metric name";
      PromFamily& f = (*out)[name];
      if (!f.samples.empty()) return where + kind + " after the family's samples";
      std::string rest;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest = rest.substr(1);
      if (kind == "TYPE") {
        if (!f.type.empty()) return where + "a second TYPE";
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped") {
          return where + "unknown type '" + rest + "'";
        }
        if (rest == "counter" && (name.size() < 6 || name.substr(name.size() - 6) != "_total")) {
          return where + "a counter whose name does not end in _total";
        }
        f.type = rest;
      } else {
        if (!f.help.empty()) return where + "a second HELP";
        f.help = rest.empty() ? "(empty)" : rest;
      }
      current = name;
      continue;
    }
    // name{labels} value
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) return where + "no value";
    const std::string name = line.substr(0, name_end);
    if (!std::regex_match(name, kName)) return where + "bad metric name";
    auto it = out->find(name);
    if (it == out->end() || it->second.type.empty()) return where + "a sample before its TYPE";
    if (name != current) return where + "the family's samples are not contiguous";
    PromSample s;
    size_t value_at = name_end;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);
      if (close == std::string::npos) return where + "unclosed labels";
      const std::string labels = line.substr(name_end + 1, close - name_end - 1);
      for (std::sregex_iterator m(labels.begin(), labels.end(), kLabel), end; m != end; ++m) {
        s.labels[(*m)[1]] = (*m)[2];
      }
      value_at = close + 1;
    }
    std::string value = line.substr(value_at);
    while (!value.empty() && value[0] == ' ') value = value.substr(1);
    value = value.substr(0, value.find(' '));  // an optional timestamp follows
    if (value == "NaN") {
      s.value = std::nan("");
    } else if (value == "+Inf" || value == "-Inf") {
      s.value = value[0] == '+' ? HUGE_VAL : -HUGE_VAL;
    } else {
      char* end = nullptr;
      s.value = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') return where + "the value is not a number";
    }
    it->second.samples.push_back(s);
  }
  for (const auto& [name, f] : *out) {
    if (f.type.empty()) return name + ": HELP without TYPE";
  }
  return "";
}

// Value of the family's sample with exactly these labels; NaN when absent.
inline double PromValue(const std::map<std::string, PromFamily>& families, const std::string& name,
                        const std::map<std::string, std::string>& labels = {}) {
  auto it = families.find(name);
  if (it == families.end()) return std::nan("");
  for (const PromSample& s : it->second.samples) {
    if (s.labels == labels) return s.value;
  }
  return std::nan("");
}

}  // namespace tenax::report::testing
