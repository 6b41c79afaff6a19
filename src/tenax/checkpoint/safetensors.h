// The Hugging Face safetensors format, byte for byte: an 8-byte little-endian header length N, N
// bytes of JSON (space-padded to a multiple of 8), then the tensors' bytes tightly packed. A file
// written here loads with `safetensors.torch.load_file`, and one written by Hugging Face loads
// here, so checkpoints and exported models need no conversion step.
// Non-goals: libtorch types (the adapter in model/ maps at::Tensor to TensorRef/TensorView);
// dtypes beyond the ten listed in DtypeSize; streaming writes of files larger than memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::ckpt {

// Bytes per element of a safetensors dtype name ("F32", "BF16", ...); 0 for an unknown name.
// Known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
size_t DtypeSize(std::string_view dtype);

// One tensor to write. `data` is borrowed and must stay valid until SerializeSafetensors returns.
struct TensorRef {
  std::string name;
  std::string dtype;           // a name DtypeSize knows
  std::vector<int64_t> shape;  // empty = scalar (one element)
  const void* data = nullptr;
  size_t nbytes = 0;  // must equal product(shape) * DtypeSize(dtype)
};

// Serializes `tensors` in the given order (data offsets follow that order) with `metadata` as the
// "__metadata__" object (omitted when empty, as Hugging Face does). The caller builds the refs
// from tensors it owns, so an unknown dtype, a size that does not match the shape, or a duplicate
// or reserved name is a bug in the caller and fails a TENAX_CHECK naming the tensor.
std::string SerializeSafetensors(const std::vector<TensorRef>& tensors,
                                 const std::map<std::string, std::string>& metadata);

// A tensor inside an open SafetensorsFile. `data` points into the file's bytes and lives as long
// as the SafetensorsFile. It is only as aligned as the writer made it (the format packs tensors
// without padding), so copy it out with memcpy rather than reading it through a typed pointer.
struct TensorView {
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// A validated, read-only safetensors file, either memory-mapped (zero-copy) or held in memory.
// Opening checks everything up front, so Get() can only fail for a name that is not there.
// Thread safety: immutable after opening; const methods are safe from any thread.
class SafetensorsFile {
 public:
  // Maps `path` read-only. Errors name the file and, where one is at fault, the tensor.
  static Result<SafetensorsFile> Open(const std::string& path);
  // Takes ownership of `bytes` (e.g. a file read by CheckpointStore::Load). `label` names the
  // source in error messages.
  static Result<SafetensorsFile> FromBytes(std::string bytes, std::string label);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Tensor names in the order their header lists them.
  const std::vector<std::string>& names() const { return names_; }
  bool Contains(const std::string& name) const { return entries_.count(name) > 0; }
  Result<TensorView> Get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The path or label given when opening; used in error messages.
  const std::string& label() const { return label_; }

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    size_t begin = 0;  // offsets relative to the data section
    size_t end = 0;
  };

  SafetensorsFile() = default;
  // Parses and validates the header of bytes()/size(); fills names_, entries_, metadata_.
  Status Parse();
  const uint8_t* bytes() const;
  size_t size() const;

  // Exactly one of mapped_ / owned_ holds the bytes. Offsets (not pointers) are stored because
  // moving a std::string may move its buffer.
  std::string label_;
  MappedFile mapped_;
  std::string owned_;
  bool is_mapped_ = false;
  size_t data_start_ = 0;  // 8 + header length
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tenax::ckpt
