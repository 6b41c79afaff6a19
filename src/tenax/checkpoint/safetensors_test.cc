// Safetensors: a byte-exact known file built by hand from the format description, round trips
// through memory and through a mapped file, and rejection of damaged headers with messages that
// name the file and the tensor.
#include "tenax/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace tenax::ckpt {
namespace {

std::string Le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return s;
}

// A whole file from a header text (padded here) and raw data bytes.
std::string MakeFile(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return Le64(header.size()) + header + data;
}

TEST(Safetensors, MatchesHandBuiltFileByteForByte) {
  const float a[2] = {1.0f, 2.0f};
  const int8_t b[3] = {-1, 0, 7};
  const std::string expected_header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"I8\",\"shape\":[1,3],\"data_offsets\":[8,11]}}"
      "    ";  // 140 bytes of JSON + 4 spaces of padding = 144
  // 144 = 0x90, little-endian in 8 bytes.
  std::string expected("\x90\x00\x00\x00\x00\x00\x00\x00", 8);
  expected += expected_header;
  // 1.0f = 0x3f800000 and 2.0f = 0x40000000, little-endian; then the three int8 bytes.
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  expected += std::string("\xff\x00\x07", 3);

  const std::string got = SerializeSafetensors(
      {{"a", "F32", {2}, a, sizeof(a)}, {"b", "I8", {1, 3}, b, sizeof(b)}}, {{"format", "pt"}});
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(got, expected);
}

TEST(Safetensors, EmptyMetadataIsOmittedAndEmptyFileIsValid) {
  const std::string got = SerializeSafetensors({}, {});
  EXPECT_EQ(got, Le64(8) + "{}      ");
  auto f = SafetensorsFile::FromBytes(got, "empty");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->names().empty());
  EXPECT_TRUE(f->metadata().empty());
}

TEST(Safetensors, RoundTripsEveryDtypeThroughMemoryAndMappedFile) {
  const std::vector<std::string> dtypes = {"F64", "F32", "F16", "BF16", "I64",
                                           "I32", "I16", "I8",  "U8",   "BOOL"};
  std::vector<std::string> payloads;
  std::vector<TensorRef> refs;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const size_t n = DtypeSize(dtypes[i]) * 6;
    std::string bytes(n, '\0');
    for (size_t k = 0; k < n; ++k) bytes[k] = static_cast<char>(i * 31 + k);
    payloads.push_back(bytes);
  }
  // Reverse-alphabetical names prove the given order is kept rather than sorted.
  for (size_t i = 0; i < dtypes.size(); ++i) {
    refs.push_back({"z" + std::to_string(9 - i) + ".weight",
                    dtypes[i],
                    {2, 3},
                    payloads[i].data(),
                    payloads[i].size()});
  }
  refs.push_back({"scalar", "F32", {}, payloads[1].data(), 4});
  refs.push_back({"empty", "F32", {0, 5}, nullptr, 0});
  const std::string file = SerializeSafetensors(refs, {{"step", "7"}, {"format", "pt"}});

  const auto path = (std::filesystem::path(::testing::TempDir()) / "rt.safetensors").string();
  ASSERT_TRUE(LocalFs().WriteFileAtomic(path, file).ok());
  auto from_mem = SafetensorsFile::FromBytes(file, "mem");
  auto from_map = SafetensorsFile::Open(path);
  for (auto* f : {&from_mem, &from_map}) {
    ASSERT_TRUE(f->ok()) << f->status().ToString();
    SafetensorsFile st = std::move(f->value());  // views must survive a move
    ASSERT_EQ(st.names().size(), refs.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      EXPECT_EQ(st.names()[i], refs[i].name);
      auto v = st.Get(refs[i].name);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_EQ(v->dtype, refs[i].dtype);
      EXPECT_EQ(v->shape, refs[i].shape);
      ASSERT_EQ(v->nbytes, refs[i].nbytes);
      if (v->nbytes > 0) {
        EXPECT_EQ(std::memcmp(v->data, refs[i].data, v->nbytes), 0);
      }
    }
    EXPECT_EQ(st.metadata().at("step"), "7");
    EXPECT_EQ(st.metadata().at("format"), "pt");
    EXPECT_FALSE(st.Get("missing").ok());
  }
}

// Expects FromBytes to fail with a message containing every one of `parts`.
void ExpectRejected(const std::string& bytes, std::vector<std::string> parts) {
  auto f = SafetensorsFile::FromBytes(bytes, "bad.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataError);
  parts.push_back("bad.safetensors");
  for (const auto& p : parts) {
    EXPECT_NE(f.status().message().find(p), std::string::npos)
        << "message '" << f.status().message() << "' lacks '" << p << "'";
  }
}

TEST(Safetensors, RejectsDamagedFilesWithPreciseMessages) {
  const std::string data(8, 'x');
  auto entry = [](const std::string& name, const std::string& body) {
    return "\"" + name + "\":{" + body + "}";
  };
  ExpectRejected("abc", {"too short"});
  ExpectRejected(Le64(1ull << 40) + "{}", {"exceeds the 100 MB limit"});
  ExpectRejected(Le64(64) + "{}      ", {"runs past the end of the file"});
  ExpectRejected(MakeFile("[1,2]", ""), {"does not start with '{'"});
  ExpectRejected(MakeFile("{\"a\":", ""), {"not valid JSON"});
  ExpectRejected(MakeFile("{" + entry("w", "\"shape\":[2],\"data_offsets\":[0,8]") + "}", data),
                 {"tensor 'w'", "no dtype"});
  ExpectRejected(
      MakeFile("{" + entry("w", "\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,8]") + "}",
               data),
      {"tensor 'w'", "unsupported dtype 'F8'"});
  ExpectRejected(MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"data_offsets\":[0,8]") + "}", data),
                 {"tensor 'w'", "no shape"});
  ExpectRejected(MakeFile("{" +
                              entry("w",
                                    "\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":"
                                    "[0,8]") +
                              "}",
                          data),
                 {"tensor 'w'", "shape entry"});
  ExpectRejected(MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"shape\":[2]") + "}", data),
                 {"tensor 'w'", "data_offsets"});
  ExpectRejected(
      MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]") + "}",
               data),
      {"tensor 'w'", "need 12 bytes"});
  ExpectRejected(
      MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]") + "}",
               data),
      {"tensor 'w'", "past the end of the data section"});
  ExpectRejected(
      MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]") + "," +
                   entry("v", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]") + "}",
               data),
      {"'w' and 'v' overlap"});
  ExpectRejected(
      MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]") + "}",
               data),
      {"unused bytes before tensor 'w'"});
  ExpectRejected(
      MakeFile("{" + entry("w", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") + "}",
               data),
      {"data section is 8 bytes but the tensors cover 4"});
  ExpectRejected(MakeFile("{\"__metadata__\":{\"k\":1}}", ""), {"'k' is not a string"});
}

TEST(Safetensors, OpenMissingFileIsNotFound) {
  auto f = SafetensorsFile::Open("/nonexistent/x.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsDeathTest, SizeMismatchIsACallerBug) {
  const float a[2] = {1, 2};
  EXPECT_DEATH(SerializeSafetensors({{"a", "F32", {3}, a, sizeof(a)}}, {}), "tensor 'a'");
  EXPECT_DEATH(SerializeSafetensors({{"a", "Q4", {2}, a, 2}}, {}), "unknown dtype 'Q4'");
}

}  // namespace
}  // namespace tenax::ckpt
