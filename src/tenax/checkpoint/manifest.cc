// Manifest and commit-marker encoding. Parsing is strict because these files decide whether a
// checkpoint is trusted: anything unexpected is a DataError that names the file.
#include "tenax/checkpoint/manifest.h"

#include <fmt/format.h>

#include <cctype>
#include <limits>

#include "tenax/core/crc32.h"

namespace tenax::ckpt {
namespace {

constexpr std::string_view kMarkerPrefix = "manifest_crc32=";

std::optional<uint32_t> ParseHex8(std::string_view s) {
  if (s.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  return v;
}

bool GetInt(const nlohmann::json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return false;
  }
  *out = it->get<int64_t>();
  return true;
}

}  // namespace

std::string StepDirName(int64_t step) { return fmt::format("step_{:08d}", step); }

std::optional<int64_t> ParseStepDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "step_";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;  // 18 digits fit in int64
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string CrcHex(uint32_t crc) { return fmt::format("{:08x}", crc); }

Status ValidateDataFileName(const std::string& name) {
  const bool ok = !name.empty() && name.find('/') == std::string::npos && name[0] != '.' &&
                  name != kManifestFile && name != kCommitFile &&
                  name.find(".tmp.") == std::string::npos;
  if (ok) return Status::Ok();
  return InvalidArgument("invalid checkpoint file name '" + name +
                         "': use a plain file name (no '/', no leading '.', no '.tmp.') other "
                         "than manifest.json and COMMITTED");
}

nlohmann::json Manifest::ToJson() const {
  nlohmann::json files_json = nlohmann::json::object();
  for (const auto& [name, f] : files) {
    files_json[name] = {{"bytes", f.bytes}, {"crc32", CrcHex(f.crc32)}};
  }
  return {{"format", kFormatName},
          {"format_version", kFormatVersion},
          {"step", step},
          {"created_unix", created_unix},
          {"world_size", world_size},
          {"files", files_json},
          {"layout", layout},
          {"extra", extra}};
}

std::string Manifest::Serialize() const {
  // error_handler replace: a caller's non-UTF-8 string in layout/extra must not throw mid-save.
  return ToJson().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<Manifest> Manifest::Parse(std::string_view text, const std::string& where) {
  const std::string damaged = kDamagedHint;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return DataError(where + " is not valid JSON (" + e.what() + ")" + damaged);
  }
  auto format = j.is_object() ? j.find("format") : j.end();
  if (format == j.end() || !format->is_string() || *format != kFormatName) {
    return DataError(where + " is not a tenax checkpoint manifest (\"format\" is not \"" +
                     kFormatName + "\")");
  }
  Manifest m;
  int64_t version = 0;
  if (!GetInt(j, "format_version", &version)) {
    return DataError(where + " has no integer format_version" + damaged);
  }
  if (version > kFormatVersion) {
    return DataError(
        fmt::format("{} has format_version {}, but this tenax reads up to {}: "
                    "upgrade tenax to load this checkpoint",
                    where, version, kFormatVersion));
  }
  if (!GetInt(j, "step", &m.step) || m.step < 0 || !GetInt(j, "created_unix", &m.created_unix) ||
      !GetInt(j, "world_size", &m.world_size) || m.world_size < 1) {
    return DataError(where + " lacks a valid step, created_unix or world_size" + damaged);
  }
  auto files = j.find("files");
  if (files == j.end() || !files->is_object()) {
    return DataError(where + " has no \"files\" object" + damaged);
  }
  for (const auto& [name, entry] : files->items()) {
    if (!ValidateDataFileName(name).ok()) {
      return DataError(where + " lists an invalid file name '" + name + "'" + damaged);
    }
    int64_t bytes = 0;
    auto crc = entry.is_object() ? entry.find("crc32") : entry.end();
    std::optional<uint32_t> crc_value;
    if (crc != entry.end() && crc->is_string()) crc_value = ParseHex8(crc->get<std::string>());
    if (!entry.is_object() || !GetInt(entry, "bytes", &bytes) || bytes < 0 || !crc_value) {
      return DataError(where + " has a malformed entry for '" + name +
                       "' (needs \"bytes\" and an 8-digit hex \"crc32\")" + damaged);
    }
    m.files[name] = FileEntry{static_cast<uint64_t>(bytes), *crc_value};
  }
  m.layout = j.value("layout", nlohmann::json::object());
  m.extra = j.value("extra", nlohmann::json::object());
  return m;
}

uint32_t ManifestCrc(const Manifest& m) { return Crc32(m.Serialize()); }

std::string CommitMarkerText(uint32_t manifest_crc32) {
  return std::string(kMarkerPrefix) + CrcHex(manifest_crc32) + "\n";
}

Result<uint32_t> ParseCommitMarker(std::string_view text, const std::string& where) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  std::optional<uint32_t> crc;
  if (text.substr(0, kMarkerPrefix.size()) == kMarkerPrefix) {
    crc = ParseHex8(text.substr(kMarkerPrefix.size()));
  }
  if (!crc) {
    return DataError(where + " is not a valid commit marker (expected \"manifest_crc32=" +
                     "<8 hex digits>\")" + kDamagedHint);
  }
  return *crc;
}

}  // namespace tenax::ckpt
