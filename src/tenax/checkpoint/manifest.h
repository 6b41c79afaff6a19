// The on-disk vocabulary of a checkpoint (docs/checkpoint_format.md is the user-facing spec):
// step folder names, manifest.json (what a complete checkpoint contains, with sizes and CRC-32s)
// and the COMMITTED marker (the CRC-32 of manifest.json, written last).
// Non-goals: any I/O (CheckpointStore does that); meaning of "layout"/"extra" (the caller's).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tenax/core/status.h"

namespace tenax::ckpt {

inline constexpr const char* kFormatName = "tenax-checkpoint";
inline constexpr int64_t kFormatVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kCommitFile = "COMMITTED";
// Appended to every error that means "this checkpoint cannot be trusted".
inline constexpr const char* kDamagedHint =
    "; this checkpoint is damaged \u2014 delete it or resume from an earlier one";

// "step_00000100". Eight digits keep `ls` in step order for any realistic run; larger steps
// simply get more digits, and readers parse the number rather than compare names.
std::string StepDirName(int64_t step);
// The step of a folder name made by StepDirName, or nullopt for anything else.
std::optional<int64_t> ParseStepDirName(std::string_view name);

// Lower-case, zero-padded 8-digit hex: how CRCs appear in manifest.json and COMMITTED.
std::string CrcHex(uint32_t crc);

// A data file name must be a plain name inside the step folder: not empty, no '/', not starting
// with '.', not a reserved name (manifest.json, COMMITTED) and free of ".tmp." (temp files).
Status ValidateDataFileName(const std::string& name);

struct FileEntry {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;  // zlib CRC-32 of the whole file
};

struct Manifest {
  int64_t step = 0;
  int64_t created_unix = 0;
  int64_t world_size = 1;
  std::map<std::string, FileEntry> files;
  nlohmann::json layout = nlohmann::json::object();  // free-form, the caller's
  nlohmann::json extra = nlohmann::json::object();   // free-form, the caller's

  nlohmann::json ToJson() const;
  // The bytes written as manifest.json (indented: people read it).
  std::string Serialize() const;
  // Parses and validates manifest.json text; `where` names it in errors.
  static Result<Manifest> Parse(std::string_view text, const std::string& where);
};

// The CRC-32 of `m.Serialize()`: what COMMITTED records once `m` is committed (Commit,
// CommitManifest). Node agents name an accepted commit by (step, this CRC).
uint32_t ManifestCrc(const Manifest& m);

// The whole content of COMMITTED, e.g. "manifest_crc32=1a2b3c4d\n".
std::string CommitMarkerText(uint32_t manifest_crc32);
// The manifest CRC recorded in a COMMITTED file; `where` names it in errors.
Result<uint32_t> ParseCommitMarker(std::string_view text, const std::string& where);

}  // namespace tenax::ckpt
