// Safetensors writer and validating reader. The reader follows the checks of the reference
// implementation (huggingface/safetensors, safetensors/src/tensor.rs): header at most 100 MB,
// JSON object starting with '{', sizes matching shapes, and tensors covering the data section
// exactly with no gap or overlap, so anything accepted here is accepted there too.
#include "tenax/checkpoint/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "tenax/core/check.h"

namespace tenax::ckpt {
namespace {

using OrderedJson = nlohmann::ordered_json;  // keeps the header's key order for names()

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

std::string Quote(const std::string& s) { return nlohmann::json(s).dump(); }

// Product of `shape` times `elem`, or false on a negative dim or overflow.
bool ShapeBytes(const std::vector<int64_t>& shape, size_t elem, size_t* out) {
  size_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return false;
    const auto ud = static_cast<size_t>(d);
    if (ud != 0 && n > std::numeric_limits<size_t>::max() / ud) return false;
    n *= ud;
  }
  *out = n;
  return true;
}

// A JSON number that is a non-negative integer fitting in int64.
bool AsIndex(const OrderedJson& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return *out >= 0;
  }
  return false;
}

}  // namespace

size_t DtypeSize(std::string_view dtype) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
  };
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return 0;
}

std::string SerializeSafetensors(const std::vector<TensorRef>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  // The header is written by hand rather than through a JSON object so that key order is exactly
  // the reference writer's: "__metadata__" first, then tensors in data order, and inside each
  // entry dtype, shape, data_offsets.
  std::string header = "{";
  if (!metadata.empty()) {
    header += Quote(kMetadataKey) + ":" + nlohmann::json(metadata).dump() + ",";
  }
  std::set<std::string> seen;
  size_t offset = 0;
  for (const TensorRef& t : tensors) {
    const std::string what = "tensor '" + t.name + "'";
    TENAX_CHECK_MSG(t.name != kMetadataKey && seen.insert(t.name).second,
                    ("duplicate or reserved " + what).c_str());
    const size_t elem = DtypeSize(t.dtype);
    TENAX_CHECK_MSG(elem != 0, ("unknown dtype '" + t.dtype + "' for " + what).c_str());
    size_t expected = 0;
    TENAX_CHECK_MSG(ShapeBytes(t.shape, elem, &expected) && expected == t.nbytes,
                    ("nbytes does not match shape * dtype size for " + what).c_str());
    TENAX_CHECK_MSG(t.data != nullptr || t.nbytes == 0, ("null data for " + what).c_str());
    header += Quote(t.name) + ":{\"dtype\":" + Quote(t.dtype) + ",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.nbytes) + "]},";
    offset += t.nbytes;
  }
  if (header.back() == ',') header.pop_back();
  header += "}";
  // Padding to 8 bytes keeps the data section 8-aligned within the file (the reference writer
  // pads with spaces, which JSON parsers skip).
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += header;
  for (const TensorRef& t : tensors) {
    if (t.nbytes > 0) out.append(static_cast<const char*>(t.data), t.nbytes);
  }
  return out;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  TENAX_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  SafetensorsFile f;
  f.label_ = path;
  f.mapped_ = std::move(mapped);
  f.is_mapped_ = true;
  TENAX_RETURN_IF_ERROR(f.Parse());
  return f;
}

Result<SafetensorsFile> SafetensorsFile::FromBytes(std::string bytes, std::string label) {
  SafetensorsFile f;
  f.label_ = std::move(label);
  f.owned_ = std::move(bytes);
  TENAX_RETURN_IF_ERROR(f.Parse());
  return f;
}

const uint8_t* SafetensorsFile::bytes() const {
  return is_mapped_ ? mapped_.data() : reinterpret_cast<const uint8_t*>(owned_.data());
}

size_t SafetensorsFile::size() const { return is_mapped_ ? mapped_.size() : owned_.size(); }

Status SafetensorsFile::Parse() {
  const std::string where = "safetensors file " + label_ + ": ";
  const uint8_t* p = bytes();
  const size_t total = size();
  if (total < 8) {
    return DataError(
        fmt::format("{}is {} bytes, too short to hold the 8-byte header length; "
                    "the file is truncated or not safetensors",
                    where, total));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(p[i]) << (8 * i);
  if (n > kMaxHeaderBytes) {
    return DataError(
        fmt::format("{}header length {} exceeds the 100 MB limit; the file is "
                    "corrupt or not safetensors",
                    where, n));
  }
  if (n > total - 8) {
    return DataError(
        fmt::format("{}header length {} runs past the end of the file ({} bytes); "
                    "the file is truncated",
                    where, n, total));
  }
  const std::string_view text(reinterpret_cast<const char*>(p + 8), n);
  if (text.empty() || text.front() != '{') {
    return DataError(where + "header does not start with '{'; the file is corrupt");
  }
  OrderedJson header;
  try {
    header = OrderedJson::parse(text);
  } catch (const std::exception& e) {
    return DataError(where + "header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) return DataError(where + "header is not a JSON object");

  data_start_ = 8 + n;
  const size_t data_size = total - data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) return DataError(where + "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return DataError(where + "__metadata__ value for '" + k + "' is not a string");
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string bad = where + "tensor '" + name + "' ";
    if (!value.is_object()) return DataError(bad + "entry is not an object");
    Entry e;
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return DataError(bad + "has no dtype");
    e.dtype = dtype->get<std::string>();
    const size_t elem = DtypeSize(e.dtype);
    if (elem == 0) return DataError(bad + "has unsupported dtype '" + e.dtype + "'");
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) return DataError(bad + "has no shape");
    for (const auto& d : *shape) {
      int64_t dim = 0;
      if (!AsIndex(d, &dim)) return DataError(bad + "has a shape entry that is not a size");
      e.shape.push_back(dim);
    }
    auto offsets = value.find("data_offsets");
    int64_t begin = 0, end = 0;
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !AsIndex((*offsets)[0], &begin) || !AsIndex((*offsets)[1], &end) || begin > end) {
      return DataError(bad + "has no valid data_offsets [begin, end]");
    }
    e.begin = static_cast<size_t>(begin);
    e.end = static_cast<size_t>(end);
    size_t expected = 0;
    if (!ShapeBytes(e.shape, elem, &expected) || expected != e.end - e.begin) {
      return DataError(
          fmt::format("{}has data_offsets [{}, {}] ({} bytes) but its shape and "
                      "dtype need {} bytes",
                      bad, begin, end, end - begin, expected));
    }
    if (e.end > data_size) {
      return DataError(
          fmt::format("{}has data_offsets [{}, {}] past the end of the data "
                      "section ({} bytes); the file is truncated or corrupt",
                      bad, begin, end, data_size));
    }
    names_.push_back(name);
    entries_.emplace(name, std::move(e));
  }

  // Tensors must tile the data section exactly: a gap or an overlap means a corrupt header, and
  // trailing bytes mean the header and data disagree about the file's length.
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  for (const auto& [name, e] : entries_) by_offset.emplace_back(&name, &e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  size_t cursor = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, e] : by_offset) {
    if (e->begin < cursor) {
      return DataError(where + "tensors '" + *prev + "' and '" + *name + "' overlap");
    }
    if (e->begin > cursor) {
      return DataError(fmt::format("{}{} unused bytes before tensor '{}'; the header is corrupt",
                                   where, e->begin - cursor, *name));
    }
    cursor = e->end;
    prev = name;
  }
  if (cursor != data_size) {
    return DataError(
        fmt::format("{}data section is {} bytes but the tensors cover {}; the "
                    "header and data disagree",
                    where, data_size, cursor));
  }
  return Status::Ok();
}

Result<TensorView> SafetensorsFile::Get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return NotFound("safetensors file " + label_ + " has no tensor '" + name + "'");
  }
  const Entry& e = it->second;
  TensorView v;
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.data = bytes() + data_start_ + e.begin;
  v.nbytes = e.end - e.begin;
  return v;
}

}  // namespace tenax::ckpt
