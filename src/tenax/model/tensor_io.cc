#include "tenax/model/tensor_io.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "tenax/core/check.h"

namespace tenax::model {
namespace {

struct DtypeName {
  at::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
    {at::kByte, "U8"},    {at::kBool, "BOOL"},
};

}  // namespace

std::string SerializeTensors(const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> cpu;  // keeps the bytes alive while serializing
  std::vector<ckpt::TensorRef> refs;
  cpu.reserve(tensors.size());
  for (const auto& t : tensors) {
    cpu.push_back(t.tensor.detach().to(at::kCPU).contiguous());
    const at::Tensor& c = cpu.back();
    const char* dtype = nullptr;
    for (const auto& d : kDtypes) {
      if (d.type == c.scalar_type()) dtype = d.name;
    }
    TENAX_CHECK_MSG(dtype != nullptr, t.name.c_str());
    refs.push_back({t.name, dtype, c.sizes().vec(), c.data_ptr(), c.nbytes()});
  }
  return ckpt::SerializeSafetensors(refs, metadata);
}

Result<std::vector<NamedTensor>> ReadTensors(const ckpt::SafetensorsFile& file) {
  std::vector<NamedTensor> out;
  for (const std::string& name : file.names()) {
    TENAX_ASSIGN_OR_RETURN(ckpt::TensorView v, file.Get(name));
    const DtypeName* d = nullptr;
    for (const auto& k : kDtypes) {
      if (v.dtype == k.name) d = &k;
    }
    if (d == nullptr) {
      return DataError(fmt::format("{}: tensor '{}' has dtype {} which tenax cannot load",
                                   file.label(), name, v.dtype));
    }
    at::Tensor t = at::empty(v.shape, at::TensorOptions().dtype(d->type));
    if (v.nbytes > 0) std::memcpy(t.data_ptr(), v.data, v.nbytes);
    out.push_back({name, t});
  }
  return out;
}

Result<std::map<std::string, at::Tensor>> ReadTensorFile(const std::string& path) {
  TENAX_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::Open(path));
  TENAX_ASSIGN_OR_RETURN(std::vector<NamedTensor> tensors, ReadTensors(file));
  std::map<std::string, at::Tensor> out;
  for (auto& t : tensors) out[t.name] = std::move(t.tensor);
  return out;
}

std::string SerializeSlices(const std::vector<TensorSlice>& slices) {
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> metadata{{"format", "tenax-sharded"}};
  for (const auto& s : slices) {
    tensors.push_back({s.name, s.values});
    nlohmann::json j = {{"shape", s.full_shape}, {"begin", s.begin}, {"end", s.end}};
    if (s.block_dim >= 0) {
      j["block"] = {{"dim", s.block_dim}, {"begin", s.block_begin}, {"end", s.block_end}};
    }
    metadata[s.name] = j.dump();
  }
  return SerializeTensors(tensors, metadata);
}

Result<std::vector<NamedTensor>> AssembleTensors(
    const std::vector<const ckpt::SafetensorsFile*>& files) {
  struct Partial {
    at::Tensor flat;
    std::vector<int64_t> shape;
    int64_t covered = 0;
    at::Tensor seen;  // one flag per element: overlaps are as wrong as gaps
  };
  std::map<std::string, Partial> parts;
  std::vector<std::string> order;
  for (const ckpt::SafetensorsFile* f : files) {
    TENAX_ASSIGN_OR_RETURN(std::vector<NamedTensor> tensors, ReadTensors(*f));
    for (auto& t : tensors) {
      auto meta = f->metadata().find(t.name);
      std::vector<int64_t> shape = t.tensor.sizes().vec();
      int64_t begin = 0, end = t.tensor.numel();
      int block_dim = -1;
      int64_t block_begin = 0, block_end = 0;
      if (meta != f->metadata().end()) {
        try {
          auto j = nlohmann::json::parse(meta->second);
          shape = j.at("shape").get<std::vector<int64_t>>();
          begin = j.at("begin").get<int64_t>();
          end = j.at("end").get<int64_t>();
          if (j.contains("block")) {
            block_dim = j["block"].at("dim").get<int>();
            block_begin = j["block"].at("begin").get<int64_t>();
            block_end = j["block"].at("end").get<int64_t>();
          }
        } catch (const nlohmann::json::exception& e) {
          return DataError(f->label() + ": bad slice metadata for " + t.name + ": " + e.what());
        }
      }
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      int64_t space = numel;  // elements the slice indexes into
      if (block_dim >= 0) {
        if (block_dim >= static_cast<int>(shape.size()) || block_begin < 0 ||
            block_end > shape[static_cast<size_t>(block_dim)] || block_begin >= block_end) {
          return DataError(
              fmt::format("{}: block of {} does not fit its shape", f->label(), t.name));
        }
        space = numel / shape[static_cast<size_t>(block_dim)] * (block_end - block_begin);
      }
      if (begin < 0 || end > space || end - begin != t.tensor.numel()) {
        return DataError(fmt::format("{}: slice [{}, {}) of {} does not fit its shape", f->label(),
                                     begin, end, t.name));
      }
      auto [it, fresh] = parts.try_emplace(t.name);
      Partial& p = it->second;
      if (fresh) {
        order.push_back(t.name);
        p.flat = at::empty({numel}, t.tensor.options());
        p.shape = shape;
        p.seen = at::zeros({numel}, at::kBool);
      } else if (p.shape != shape) {
        return DataError(fmt::format("{}: {} has shape {} here but {} elsewhere", f->label(),
                                     t.name, fmt::join(shape, "x"), fmt::join(p.shape, "x")));
      }
      if (block_dim >= 0) {
        // Positions in the full tensor of the block's flattened elements [begin, end).
        at::Tensor pos = at::arange(numel, at::kLong)
                             .view(shape)
                             .narrow(block_dim, block_begin, block_end - block_begin)
                             .reshape({-1})
                             .narrow(0, begin, end - begin);
        if (p.seen.index_select(0, pos).any().item<bool>()) {
          return DataError(fmt::format("{}: slices of {} overlap", f->label(), t.name));
        }
        p.seen.index_fill_(0, pos, true);
        p.flat.index_copy_(0, pos, t.tensor.reshape({-1}).to(p.flat.scalar_type()));
        p.covered += end - begin;
        continue;
      }
      if (p.seen.narrow(0, begin, end - begin).any().item<bool>()) {
        return DataError(fmt::format("{}: slices of {} overlap", f->label(), t.name));
      }
      p.seen.narrow(0, begin, end - begin).fill_(true);
      p.flat.narrow(0, begin, end - begin).copy_(t.tensor.reshape({-1}));
      p.covered += end - begin;
    }
  }
  std::vector<NamedTensor> out;
  for (const auto& name : order) {
    Partial& p = parts.at(name);
    if (p.covered != p.flat.numel()) {
      return DataError(
          fmt::format("the checkpoint's shards cover {} of {} elements of {}; a "
                      "rank's file is missing",
                      p.covered, p.flat.numel(), name));
    }
    out.push_back({name, p.flat.view(p.shape)});
  }
  return out;
}

}  // namespace tenax::model
