#include "tenax/data/shard.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tenax/core/crc32.h"
#include "tenax/core/temp_dir.h"
#include "tenax/data/token_file.h"
#include "tenax/data/token_stream.h"

namespace tenax::data {
namespace {

using testing::TempDir;

std::string ReadFileOrDie(const std::string& path) {
  Result<std::string> r = LocalFs().ReadFile(path);
  TENAX_CHECK(r.ok());
  return std::move(r).value();
}

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
  EXPECT_EQ(u32, 2u);  // version
  std::memcpy(&u32, &s[12], 4);
  EXPECT_EQ(u32, 2u);  // width
  std::memcpy(&u64, &s[16], 8);
  EXPECT_EQ(u64, 3u);
  std::memcpy(&u32, &s[24], 4);
  EXPECT_EQ(u32, 1000u);
  std::memcpy(&u32, &s[28], 4);
  EXPECT_EQ(u32, 7u);
  std::memcpy(&u32, &s[32], 4);
  EXPECT_EQ(u32, 0xFFFFFFFFu);  // no BOS
  std::memcpy(&u32, &s[36], 4);
  EXPECT_EQ(u32, Crc32(s.data() + 64, 6));  // CRC-32 of the token bytes
  for (size_t i = 40; i < 60; ++i) EXPECT_EQ(s[i], '\0') << i;
  std::memcpy(&u32, &s[60], 4);
  EXPECT_EQ(u32, Crc32(s.data(), 60));  // CRC-32 of the header before it
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

// Recomputes the header checksum after a test edits a header field on purpose, so the reader
// reaches the check for that field instead of stopping at "damaged header".
std::string Reseal(std::string b) {
  const uint32_t crc = Crc32(b.data(), 60);
  std::memcpy(&b[60], &crc, 4);
  return b;
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
    EXPECT_EQ(st.message().find("delete"), std::string::npos) << st.message();
  };
  expect(bytes_.substr(0, 40), "shorter than the 64-byte header");
  std::string b = bytes_;
  b[0] = 'X';
  expect(b, "magic");
  b = bytes_;
  b[8] = 3;
  Status version = OpenWith(b);
  EXPECT_NE(version.message().find("version 3"), std::string::npos) << version.message();
  b = bytes_;
  b[12] = 3;
  expect(Reseal(b), "token width 3");
  expect(b, "damaged header");  // the same edit without a matching header checksum
  expect(bytes_.substr(0, bytes_.size() - 2), "truncated");
  expect(bytes_ + "xx", "truncated");
  b = bytes_;
  b[64 + 2] = 50;  // token 1 := 50, vocab is 10
  expect(b, "holds id 50 at position 1");
  b = bytes_;
  b[28] = 20;  // eos 20 >= vocab 10
  expect(Reseal(b), "eos id 20");
  EXPECT_TRUE(OpenWith(bytes_).ok());
}

// Damage that keeps every id inside the vocabulary is caught by the token checksum.
TEST_F(DamagedShard, InRangeCorruptionIsCaughtByTheChecksum) {
  std::string b = bytes_;
  b[64 + 2] = 5;  // token 1: 2 -> 5, still < vocab 10
  Status st = OpenWith(b);
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("is corrupt: its tokens' CRC-32"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path_), std::string::npos);
  EXPECT_NE(st.message().find("tenax prepare"), std::string::npos);
  // Without verification (the caller's choice) the header alone still opens.
  TENAX_CHECK(LocalFs().WriteFileAtomic(path_, b).ok());
  EXPECT_TRUE(ShardReader::Open(path_, /*verify_tokens=*/false).ok());
}

// Version-1 shards (no checksums) written by an older tenax keep loading.
TEST_F(DamagedShard, Version1StillLoads) {
  std::string v1 = bytes_;
  v1[8] = 1;
  std::memset(&v1[32], 0, 32);  // version 1 reserved these bytes as zero
  ASSERT_TRUE(OpenWith(v1).ok()) << OpenWith(v1).ToString();
  Result<ShardReader> r = ShardReader::Open(path_);
  EXPECT_EQ(r->version(), 1u);
  EXPECT_EQ(r->eos(), std::optional<uint32_t>(9));
  EXPECT_FALSE(r->bos().has_value());
  EXPECT_EQ(r->token(3), 4u);
}

TEST(Shard, AnLlmcFileIsRecognisedNotCalledDamaged) {
  TempDir dir;
  ASSERT_TRUE(WriteLlmcFile(dir.Join("tiny_train.bin"), {1, 2, 3}, false).ok());
  Status st = ShardReader::Open(dir.Join("tiny_train.bin")).status();
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("llm.c token file"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("data.source = \"tokens\""), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("damaged"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("delete"), std::string::npos) << st.message();
}

TEST(ShardWriter, StreamsTheSameBytesAsEncodeShardAndCommitsAtomically) {
  TempDir dir;
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 700000; ++i) ids.push_back((i * 7919u) % 100000u);  // > 1 flush
  for (const uint32_t vocab : {100000u, 65536u * 2}) {
    const std::string path = dir.Join("s" + std::to_string(vocab) + ".bin");
    {
      Result<ShardWriter> w = ShardWriter::Create(path, vocab, 3u, 4u);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      ASSERT_TRUE(w->Append(ids.data(), 300000).ok());
      ASSERT_TRUE(w->Append(ids.data() + 300000, ids.size() - 300000).ok());
      EXPECT_FALSE(LocalFs().Exists(path));  // not visible before Commit
      ASSERT_TRUE(w->Commit().ok());
    }
    EXPECT_EQ(ReadFileOrDie(path), *EncodeShard(ids, vocab, 3u, 4u));
  }
  const std::vector<std::string> both = {"s100000.bin", "s131072.bin"};
  EXPECT_EQ(*LocalFs().ListDir(dir.path()), both);
  {
    // An id outside the vocabulary is refused; an uncommitted writer leaves nothing behind.
    Result<ShardWriter> w = ShardWriter::Create(dir.Join("t.bin"), 10, std::nullopt, std::nullopt);
    ASSERT_TRUE(w.ok());
    const uint32_t bad[] = {1, 10};
    EXPECT_NE(w->Append(bad, 2).message().find("id 10"), std::string::npos);
  }
  EXPECT_EQ(*LocalFs().ListDir(dir.path()), both);
}

TEST(ShardWriter, MoveTailToSplitsOffTheLastTokens) {
  TempDir dir;
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 300000; ++i) ids.push_back(i % 1000);
  Result<ShardWriter> a = ShardWriter::Create(dir.Join("a.bin"), 1000, std::nullopt, std::nullopt);
  Result<ShardWriter> b = ShardWriter::Create(dir.Join("b.bin"), 1000, std::nullopt, std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(b->Append({7, 8}).ok());
  ASSERT_TRUE(a->Append(ids).ok());
  ASSERT_TRUE(a->MoveTailTo(1000, &*b).ok());
  ASSERT_TRUE(a->Append({5}).ok());  // appending after a cut continues at the cut
  ASSERT_TRUE(a->Commit().ok());
  ASSERT_TRUE(b->Commit().ok());
  std::vector<uint32_t> want_a(ids.begin(), ids.end() - 1000);
  want_a.push_back(5);
  std::vector<uint32_t> want_b = {7, 8};
  want_b.insert(want_b.end(), ids.end() - 1000, ids.end());
  EXPECT_EQ(ReadFileOrDie(dir.Join("a.bin")), *EncodeShard(want_a, 1000, std::nullopt));
  EXPECT_EQ(ReadFileOrDie(dir.Join("b.bin")), *EncodeShard(want_b, 1000, std::nullopt));
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

TEST(TokenStream, SegmentsReadAsOneSequence) {
  const std::vector<uint16_t> a = {1, 2, 3}, b = {}, c = {4, 5}, d = {6};
  auto bytes = [](const std::vector<uint16_t>& v) {
    return reinterpret_cast<const uint8_t*>(v.data());
  };
  TokenStream s = TokenStream::FromSegments(
      nullptr, {{bytes(a), 3}, {bytes(b), 0}, {bytes(c), 2}, {bytes(d), 1}}, 2, 10, std::nullopt,
      std::nullopt, "segments");
  ASSERT_EQ(s.size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s.at(i), static_cast<uint32_t>(i + 1));
  for (int start = 0; start < 6; ++start) {
    for (int count = 0; start + count <= 6; ++count) {
      std::vector<int64_t> out(count);
      s.Read(start, count, out.data());
      for (int i = 0; i < count; ++i) ASSERT_EQ(out[i], start + i + 1) << start << "+" << count;
    }
  }
}

}  // namespace
}  // namespace tenax::data
