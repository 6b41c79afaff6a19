#include "tenax/data/shard.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tenax/core/temp_dir.h"
#include "tenax/data/token_stream.h"

namespace tenax::data {
namespace {

using testing::TempDir;

TEST(Shard, WidthFollowsVocab) {
  EXPECT_EQ(ShardTokenWidth(257), 2u);
  EXPECT_EQ(ShardTokenWidth(65536), 2u);
  EXPECT_EQ(ShardTokenWidth(65537), 4u);
}

TEST(Shard, HeaderBytesMatchTheSpec) {
  Result<std::string> b = EncodeShard({1, 2, 300}, 1000, 7);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 64u + 3 * 2);
  const std::string& s = *b;
  EXPECT_EQ(s.substr(0, 8), "TENAXTOK");
  uint32_t u32;
  uint64_t u64;
  std::memcpy(&u32, &s[8], 4);
  EXPECT_EQ(u32, 1u);  // version
  std::memcpy(&u32, &s[12], 4);
  EXPECT_EQ(u32, 2u);  // width
  std::memcpy(&u64, &s[16], 8);
  EXPECT_EQ(u64, 3u);
  std::memcpy(&u32, &s[24], 4);
  EXPECT_EQ(u32, 1000u);
  std::memcpy(&u32, &s[28], 4);
  EXPECT_EQ(u32, 7u);
  for (size_t i = 32; i < 64; ++i) EXPECT_EQ(s[i], '\0') << i;
  // 300 = 0x012C little-endian.
  EXPECT_EQ(static_cast<unsigned char>(s[68]), 0x2C);
  EXPECT_EQ(static_cast<unsigned char>(s[69]), 0x01);
}

TEST(Shard, RoundTripsBothWidths) {
  TempDir dir;
  const std::vector<uint32_t> small = {0, 1, 256, 65535, 42};
  ASSERT_TRUE(WriteShard(LocalFs(), dir.Join("a.bin"), small, 65536, std::nullopt).ok());
  Result<ShardReader> a = ShardReader::Open(dir.Join("a.bin"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->token_width(), 2u);
  EXPECT_EQ(a->num_tokens(), 5);
  EXPECT_EQ(a->vocab_size(), 65536u);
  EXPECT_FALSE(a->eos().has_value());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a->token(i), small[i]);

  const std::vector<uint32_t> big = {100000, 0, 99999, 5};
  ASSERT_TRUE(WriteShard(LocalFs(), dir.Join("b.bin"), big, 100001, 100000u).ok());
  Result<ShardReader> b = ShardReader::Open(dir.Join("b.bin"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->token_width(), 4u);
  EXPECT_EQ(b->eos(), std::optional<uint32_t>(100000));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b->token(i), big[i]);

  TokenStream s = TokenStream::FromShard(std::move(b).value(), "b");
  EXPECT_EQ(s.size(), 4);
  EXPECT_EQ(s.at(2), 99999u);
  std::vector<int64_t> out(3);
  s.Read(1, 3, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{0, 99999, 5}));
}

TEST(Shard, WriterRejectsOutOfVocabIds) {
  Status st = WriteShard(LocalFs(), "/tmp/unused.bin", {3, 9}, 9, std::nullopt);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("id 9"), std::string::npos) << st.message();
  EXPECT_FALSE(EncodeShard({1}, 9, 9u).ok());  // eos outside vocab
}

class DamagedShard : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = *EncodeShard({1, 2, 3, 4}, 10, 9u);
    path_ = dir_.Join("s.bin");
  }
  Status OpenWith(const std::string& bytes) {
    TENAX_CHECK(LocalFs().WriteFileAtomic(path_, bytes).ok());
    return ShardReader::Open(path_).status();
  }
  TempDir dir_;
  std::string bytes_;
  std::string path_;
};

TEST_F(DamagedShard, EachDefectHasItsOwnMessage) {
  auto expect = [&](const std::string& bytes, const std::string& fragment) {
    Status st = OpenWith(bytes);
    EXPECT_EQ(st.code(), StatusCode::kDataError) << fragment;
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(path_), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("tenax prepare"), std::string::npos) << st.message();
  };
  expect(bytes_.substr(0, 40), "shorter than the 64-byte header");
  std::string b = bytes_;
  b[0] = 'X';
  expect(b, "magic");
  b = bytes_;
  b[8] = 2;
  Status version = OpenWith(b);
  EXPECT_NE(version.message().find("version 2"), std::string::npos) << version.message();
  b = bytes_;
  b[12] = 3;
  expect(b, "token width 3");
  expect(bytes_.substr(0, bytes_.size() - 2), "truncated");
  expect(bytes_ + "xx", "truncated");
  b = bytes_;
  b[64 + 2] = 50;  // token 1 := 50, vocab is 10
  expect(b, "holds id 50 at position 1");
  b = bytes_;
  b[28] = 20;  // eos 20 >= vocab 10
  expect(b, "eos id 20");
  EXPECT_TRUE(OpenWith(bytes_).ok());
}

TEST(Shard, MissingFileIsNotFoundWithAHint) {
  Result<ShardReader> r = ShardReader::Open("/tmp/definitely/not/here.bin");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("tenax prepare"), std::string::npos);
}

TEST(TokenStream, FromVector) {
  TokenStream s = TokenStream::FromVector({5, 6, 7}, 8, 7u, "mem");
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.vocab_size(), 8u);
  EXPECT_EQ(s.eos(), std::optional<uint32_t>(7));
  EXPECT_EQ(s.at(0), 5u);
  EXPECT_EQ(s.name(), "mem");
  TokenStream copy = s;  // shares storage
  EXPECT_EQ(copy.at(2), 7u);
  EXPECT_EQ(TokenStream().size(), 0);
}

}  // namespace
}  // namespace tenax::data
