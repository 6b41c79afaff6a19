#include "tenax/model/tensor_io.h"

#include <fmt/format.h>

#include <cstring>

#include "tenax/core/check.h"

namespace tenax::model {
namespace {

struct DtypeName {
  at::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"},
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

}  // namespace tenax::model
