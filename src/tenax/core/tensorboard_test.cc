// TensorBoard event files: known byte vectors for the framing and an Event, a round trip through
// an independent decoder written here (its own bitwise CRC-32C and protobuf parsing), and the
// independent Python reader tests/tools/read_tfevents.py.
#include "tenax/core/tensorboard.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tenax/core/crc32.h"
#include "tenax/core/fs.h"

namespace tenax {
namespace {

namespace stdfs = std::filesystem;

// ---- Independent minimal decoder (shares no code with tensorboard.cc) ----

uint32_t BitwiseCrc32c(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  return ~crc;
}
uint32_t Masked(const std::string& s) {
  const uint32_t c = BitwiseCrc32c(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
uint64_t Le(const std::string& s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  return v;
}

struct Field {
  int number = 0, wire = 0;
  uint64_t scalar = 0;  // varint / fixed64 / fixed32 bits
  std::string bytes;    // length-delimited
};

std::vector<Field> ParseMessage(const std::string& m) {
  std::vector<Field> out;
  size_t pos = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= m.size() || shift > 63) throw std::runtime_error("bad varint");
      const auto b = static_cast<uint8_t>(m[pos++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (pos < m.size()) {
    Field f;
    const uint64_t key = varint();
    f.number = static_cast<int>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    if (f.wire == 0) {
      f.scalar = varint();
    } else if (f.wire == 1 || f.wire == 5) {
      const int n = f.wire == 1 ? 8 : 4;
      if (pos + n > m.size()) throw std::runtime_error("truncated fixed");
      f.scalar = Le(m, pos, n);
      pos += n;
    } else if (f.wire == 2) {
      const uint64_t n = varint();
      if (pos + n > m.size()) throw std::runtime_error("truncated bytes");
      f.bytes = m.substr(pos, n);
      pos += n;
    } else {
      throw std::runtime_error("bad wire type");
    }
    out.push_back(f);
  }
  return out;
}

struct Decoded {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

Decoded DecodeEvent(const std::string& payload) {
  Decoded d;
  for (const Field& f : ParseMessage(payload)) {
    if (f.number == 1 && f.wire == 1) std::memcpy(&d.wall_time, &f.scalar, 8);
    if (f.number == 2 && f.wire == 0) d.step = static_cast<int64_t>(f.scalar);
    if (f.number == 3 && f.wire == 2) d.file_version = f.bytes;
    if (f.number == 5 && f.wire == 2) {
      for (const Field& v : ParseMessage(f.bytes)) {
        std::string tag;
        float value = 0;
        for (const Field& g : ParseMessage(v.bytes)) {
          if (g.number == 1 && g.wire == 2) tag = g.bytes;
          if (g.number == 2 && g.wire == 5) {
            const auto bits = static_cast<uint32_t>(g.scalar);
            std::memcpy(&value, &bits, 4);
          }
        }
        d.values.emplace_back(tag, value);
      }
    }
  }
  return d;
}

// Splits a file into records, checking both masked CRCs of each.
std::vector<std::string> ReadRecords(const std::string& data) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < data.size()) {
    if (data.size() - pos < 16) throw std::runtime_error("truncated record");
    const uint64_t n = Le(data, pos, 8);
    if (Le(data, pos + 8, 4) != Masked(data.substr(pos, 8))) throw std::runtime_error("len crc");
    if (pos + 16 + n > data.size()) throw std::runtime_error("truncated payload");
    std::string payload = data.substr(pos + 12, n);
    if (Le(data, pos + 12 + n, 4) != Masked(payload)) throw std::runtime_error("payload crc");
    out.push_back(std::move(payload));
    pos += 16 + n;
  }
  return out;
}

// ---- Tests ----

TEST(TensorBoard, FramingMatchesKnownVectors) {
  EXPECT_EQ(BitwiseCrc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(tfevents::MaskCrc(0), 0xa282ead8u);
  // An empty record: 8 zero length bytes, masked CRC-32C of them, masked CRC-32C of "".
  const std::string empty("\0\0\0\0\0\0\0\0\x29\x03\x98\x07\xd8\xea\x82\xa2", 16);
  EXPECT_EQ(tfevents::FrameRecord(""), empty);
}

TEST(TensorBoard, ScalarEventMatchesHandEncodedProto) {
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\xf0\x3f"  // wall_time (1, fixed64) = 1.0
      "\x10\x07"                              // step (2, varint) = 7
      "\x2a\x0a"                              // summary (5, 10 bytes)
      "\x0a\x08"                              //   value (1, 8 bytes)
      "\x0a\x01\x61"                          //     tag (1) = "a" (0x61)
      "\x15\x00\x00\x80\x3f",                 //     simple_value (2, fixed32) = 1.0f
      23);
  EXPECT_EQ(tfevents::ScalarEvent("a", 7, 1.0f, 1.0), expected);
  const std::string version(
      "\x09\x00\x00\x00\x00\x00\x00\x00\x00\x1a\x0d"
      "brain.Event:2",
      24);
  EXPECT_EQ(tfevents::FileVersionEvent(0.0), version);
}

class TensorBoardFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (stdfs::path(::testing::TempDir()) /
            ("tenax_tb_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    stdfs::remove_all(dir_);
  }
  void TearDown() override { stdfs::remove_all(dir_); }

  // Writes the same points every test checks; returns the file path.
  std::string WriteSample() {
    auto w = TensorBoardWriter::Open(dir_ + "/tb");
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& p : points_) {
      EXPECT_TRUE((*w)->AddScalar(p.tag, p.step, p.value, 1.7e9 + p.step).ok());
      EXPECT_TRUE((*w)->Flush().ok());
    }
    return (*w)->path();
  }

  struct Point {
    std::string tag;
    int64_t step;
    float value;
  };
  const std::vector<Point> points_ = {{"train/loss", 0, 10.5f},
                                      {"train/lr", 1, 3e-4f},
                                      {"train/loss", 300, 2.25f},
                                      {"eval/loss \xc3\xa9", 5000000000LL, -0.125f},
                                      {"neg", -3, 1e30f}};
  std::string dir_;
};

TEST_F(TensorBoardFileTest, FileNameAndIndependentDecoderRoundTrip) {
  const std::string path = WriteSample();
  const std::string name = stdfs::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(::getpid()) + "."), std::string::npos) << name;

  auto data = LocalFs().ReadFile(path);
  ASSERT_TRUE(data.ok());
  const std::vector<std::string> records = ReadRecords(*data);
  ASSERT_EQ(records.size(), points_.size() + 1);
  const Decoded first = DecodeEvent(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_GT(first.wall_time, 1.6e9);
  for (size_t i = 0; i < points_.size(); ++i) {
    const Decoded d = DecodeEvent(records[i + 1]);
    EXPECT_EQ(d.step, points_[i].step);
    EXPECT_DOUBLE_EQ(d.wall_time, 1.7e9 + points_[i].step);
    ASSERT_EQ(d.values.size(), 1u);
    EXPECT_EQ(d.values[0].first, points_[i].tag);
    EXPECT_EQ(d.values[0].second, points_[i].value);  // bit-exact float round trip
  }
}

TEST_F(TensorBoardFileTest, TwoWritersInOneSecondGetDistinctFiles) {
  auto a = TensorBoardWriter::Open(dir_);
  auto b = TensorBoardWriter::Open(dir_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
}

// Runs `cmd`, returning its exit status and stdout.
std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST_F(TensorBoardFileTest, IndependentPythonReaderAgrees) {
  const char* src = std::getenv("TENAX_SOURCE_DIR");
  if (src == nullptr) GTEST_SKIP() << "TENAX_SOURCE_DIR unset (run through ctest)";
  if (RunCommand("/usr/bin/python3 -c 'import crcmod' 2>/dev/null").first != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with crcmod missing (Debian: python3-crcmod)";
  }
  const std::string reader = std::string(src) + "/tests/tools/read_tfevents.py";
  const std::string path = WriteSample();
  auto [rc, out] = RunCommand("/usr/bin/python3 '" + reader + "' '" + path + "'");
  ASSERT_EQ(rc, 0) << out;
  std::vector<nlohmann::json> lines;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    lines.push_back(nlohmann::json::parse(out.substr(pos, end - pos)));
    pos = end == std::string::npos ? out.size() : end + 1;
  }
  ASSERT_EQ(lines.size(), points_.size());
  for (size_t i = 0; i < points_.size(); ++i) {
    EXPECT_EQ(lines[i]["step"].get<int64_t>(), points_[i].step);
    EXPECT_EQ(lines[i]["tag"].get<std::string>(), points_[i].tag);
    EXPECT_EQ(static_cast<float>(lines[i]["value"].get<double>()), points_[i].value);
  }

  // The reader must fail loudly on damage: flip one payload byte of the last record.
  auto data = LocalFs().ReadFile(path);
  ASSERT_TRUE(data.ok());
  (*data)[data->size() - 6] ^= 0x01;
  ASSERT_TRUE(LocalFs().WriteFileAtomic(path, *data).ok());
  auto [bad_rc, bad_out] = RunCommand("/usr/bin/python3 '" + reader + "' '" + path + "' 2>&1");
  EXPECT_EQ(bad_rc, 1) << bad_out;
  EXPECT_NE(bad_out.find("payload CRC mismatch"), std::string::npos) << bad_out;
  EXPECT_THROW(ReadRecords(*data), std::runtime_error);
}

}  // namespace
}  // namespace tenax
