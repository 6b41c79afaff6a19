#include "tenax/data/text_input.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "tenax/core/temp_dir.h"

namespace tenax::data {
namespace {

using testing::TempDir;

std::string ReadAll(ByteSource& src, size_t chunk) {
  std::string out, buf(chunk, '\0');
  for (;;) {
    Result<size_t> n = src.Read(&buf[0], chunk);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok() || *n == 0) return out;
    out.append(buf.data(), *n);
  }
}

TEST(TextInput, FormatFollowsTheNameWithoutTheCompressionSuffix) {
  EXPECT_EQ(InputFormatOf("a/b.jsonl"), InputFormat::kJsonl);
  EXPECT_EQ(InputFormatOf("b.jsonl.gz"), InputFormat::kJsonl);
  EXPECT_EQ(InputFormatOf("b.ndjson.zst"), InputFormat::kJsonl);
  EXPECT_EQ(InputFormatOf("b.json"), InputFormat::kText);
  EXPECT_EQ(InputFormatOf("b.txt.gz"), InputFormat::kText);
  EXPECT_EQ(InputFormatOf("ca01"), InputFormat::kText);
}

// Plain, gzip (two members) and zstd (two frames) decode to the same bytes, whatever the read
// size; compression is told by content, not by name.
TEST(TextInput, DecompressesByMagic) {
  TempDir dir;
  std::mt19937 rng(1);
  std::string data;
  for (int i = 0; i < 300000; ++i) data += static_cast<char>("ab \n\x00\xff"[rng() % 6]);
  const std::string half_a = data.substr(0, 100000), half_b = data.substr(100000);
  dir.Write("a", half_a);
  dir.Write("b", half_b);
  dir.Write("plain.bin", data);
  const std::string cd = "cd " + dir.path() + " && ";
  ASSERT_EQ(
      std::system((cd + "gzip -c a > two.gz && gzip -c b >> two.gz && cp two.gz misnamed").c_str()),
      0);
  std::vector<std::pair<std::string, std::string>> files = {
      {"plain.bin", "plain"}, {"two.gz", "gzip"}, {"misnamed", "gzip"}};
  if (HaveZstd()) {
    ASSERT_EQ(std::system((cd + "zstd -q -c a > two.zst && zstd -q -c b >> two.zst").c_str()), 0);
    files.emplace_back("two.zst", "zstd");
  }
  for (const auto& [name, kind] : files) {
    for (size_t chunk : {1, 7, 65536}) {
      Result<std::unique_ptr<ByteSource>> src = OpenByteSource(dir.Join(name));
      ASSERT_TRUE(src.ok()) << src.status().ToString();
      EXPECT_STREQ((*src)->compression(), kind.c_str());
      EXPECT_TRUE(ReadAll(**src, chunk) == data) << name << " chunk " << chunk;
    }
  }
  // A gzip file cut short is named as truncated.
  const std::string gz = *LocalFs().ReadFile(dir.Join("two.gz"));
  dir.Write("cut.gz", gz.substr(0, gz.size() / 2));
  Result<std::unique_ptr<ByteSource>> cut = OpenByteSource(dir.Join("cut.gz"));
  ASSERT_TRUE(cut.ok());
  std::string buf(1 << 20, '\0');
  Status st;
  for (;;) {
    Result<size_t> n = (*cut)->Read(&buf[0], buf.size());
    if (!n.ok()) {
      st = n.status();
      break;
    }
    if (*n == 0) break;
  }
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("truncated gzip"), std::string::npos) << st.message();
  EXPECT_EQ(OpenByteSource(dir.Join("none")).status().code(), StatusCode::kNotFound);
}

TEST(TextInput, LineReaderSplitsLinesAndBoundsTheirLength) {
  TempDir dir;
  dir.Write("l.jsonl", "one\n\ntwo\r\n" + std::string(5000, 'x') + "\nlast");
  Result<std::unique_ptr<ByteSource>> src = OpenByteSource(dir.Join("l.jsonl"));
  ASSERT_TRUE(src.ok());
  LineReader lines(src->get(), "l.jsonl");
  std::vector<std::string> got;
  std::string_view line;
  while (*lines.Next(&line)) got.emplace_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"one", "", "two\r", std::string(5000, 'x'), "last"}));
  EXPECT_EQ(lines.line_number(), 5);

  src = OpenByteSource(dir.Join("l.jsonl"));
  LineReader small(src->get(), "l.jsonl", 1000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(*small.Next(&line));
  Result<bool> long_line = small.Next(&line);
  EXPECT_EQ(long_line.status().code(), StatusCode::kDataError);
  EXPECT_NE(long_line.status().message().find("l.jsonl line 4 is longer than 1000"),
            std::string::npos)
      << long_line.status().message();
}

}  // namespace
}  // namespace tenax::data
