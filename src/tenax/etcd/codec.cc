// The etcd gateway's encoding and the parsing of its answers (see internal.h).
#include <fmt/format.h>

#include "tenax/etcd/internal.h"

namespace tenax::etcd::internal {

using json = nlohmann::json;

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The gateway carries keys and values (protobuf `bytes`) as standard base64.
std::string Base64Encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// Accepts padded or unpadded standard base64; nullopt on anything else.
std::optional<std::string> Base64Decode(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t data_chars = in.size();
  while (data_chars > 0 && in[data_chars - 1] == '=') --data_chars;
  if (in.size() - data_chars > 2) return std::nullopt;
  for (size_t i = 0; i < data_chars; ++i) {
    const char c = in[i];
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else {
      return std::nullopt;
    }
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone trailing character carries no whole byte
  return out;
}

// The end of the key range holding exactly the keys that start with `prefix`: the prefix with its
// last byte incremented (trailing 0xff bytes dropped first); "\0" (every key) for an empty or
// all-0xff prefix, as etcd defines it.
std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (uint8_t(end.back()) < 0xff) {
      end.back() = char(uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// The gateway writes int64 fields as JSON strings and omits fields that are zero.
bool Int64Field(const json& j, const char* name, int64_t* out) {
  *out = 0;
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = s[0] == '-' ? -v : v;
  return true;
}

bool BytesField(const json& j, const char* name, std::string* out) {
  out->clear();
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  auto decoded = Base64Decode(it->get_ref<const std::string&>());
  if (!decoded) return false;
  *out = std::move(*decoded);
  return true;
}

bool BoolField(const json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

Status Malformed(const std::string& what, const json& j) {
  std::string text = j.dump();
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return DataError("etcd answered a malformed " + what + ": " + text);
}

Result<KeyValue> ParseKeyValue(const json& j) {
  KeyValue kv;
  if (!j.is_object() || !BytesField(j, "key", &kv.key) || !BytesField(j, "value", &kv.value) ||
      !Int64Field(j, "create_revision", &kv.create_revision) ||
      !Int64Field(j, "mod_revision", &kv.mod_revision) || !Int64Field(j, "version", &kv.version) ||
      !Int64Field(j, "lease", &kv.lease)) {
    return Malformed("key-value", j);
  }
  return kv;
}

Result<int64_t> HeaderRevision(const json& j) {
  int64_t revision = 0;
  const auto it = j.find("header");
  if (it == j.end() || !it->is_object() || !Int64Field(*it, "revision", &revision)) {
    return Malformed("response header", j);
  }
  return revision;
}

Result<RangeResponse> ParseRange(const json& j) {
  RangeResponse r;
  TENAX_ASSIGN_OR_RETURN(r.revision, HeaderRevision(j));
  const auto it = j.find("kvs");
  if (it != j.end()) {
    if (!it->is_array()) return Malformed("range response", j);
    for (const auto& e : *it) {
      TENAX_ASSIGN_OR_RETURN(auto kv, ParseKeyValue(e));
      r.kvs.push_back(std::move(kv));
    }
  }
  return r;
}

// Splits "HOST:PORT"; false on a missing host or a port outside 1..65535.
bool SplitEndpoint(const std::string& endpoint, std::string* host, int* port) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) return false;
  if (endpoint.find(':') != colon || endpoint.find('/') != std::string::npos) return false;
  const std::string p = endpoint.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  *port = std::stoi(p);
  *host = endpoint.substr(0, colon);
  return *port >= 1 && *port <= 65535;
}

}  // namespace tenax::etcd::internal
