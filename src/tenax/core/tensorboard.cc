// Event-file encoding by hand. Protobuf wire format in brief: each field is a varint key
// (field_number << 3 | wire_type) followed by a varint (type 0), 8 little-endian bytes (type 1),
// a varint length and bytes (type 2), or 4 little-endian bytes (type 5). Field numbers below are
// those of tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto.
#include "tenax/core/tensorboard.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "tenax/core/crc32.h"
#include "tenax/core/fs.h"

namespace tenax {
namespace tfevents {
namespace {

constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Event
constexpr int kEventWallTime = 1;     // double
constexpr int kEventStep = 2;         // int64
constexpr int kEventFileVersion = 3;  // string
constexpr int kEventSummary = 5;      // Summary
// Summary
constexpr int kSummaryValue = 1;  // repeated Summary.Value
// Summary.Value
constexpr int kValueTag = 1;          // string
constexpr int kValueSimpleValue = 2;  // float

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void PutKey(std::string* out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void PutDouble(std::string* out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  PutKey(out, field, kFixed64);
  PutLittleEndian(out, bits, 8);
}

void PutFloat(std::string* out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  PutKey(out, field, kFixed32);
  PutLittleEndian(out, bits, 4);
}

// int64 is encoded as the varint of its two's-complement uint64 (10 bytes when negative).
void PutInt64(std::string* out, int field, int64_t v) {
  PutKey(out, field, kVarint);
  PutVarint(out, static_cast<uint64_t>(v));
}

void PutBytes(std::string* out, int field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

}  // namespace

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string FrameRecord(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  PutLittleEndian(&out, payload.size(), 8);
  PutLittleEndian(&out, MaskCrc(Crc32c(out.data(), 8)), 4);
  out.append(payload);
  PutLittleEndian(&out, MaskCrc(Crc32c(payload.data(), payload.size())), 4);
  return out;
}

std::string FileVersionEvent(double wall_time) {
  std::string event;
  PutDouble(&event, kEventWallTime, wall_time);
  PutBytes(&event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string ScalarEvent(const std::string& tag, int64_t step, float value, double wall_time) {
  std::string value_msg;
  PutBytes(&value_msg, kValueTag, tag);
  PutFloat(&value_msg, kValueSimpleValue, value);
  std::string summary;
  PutBytes(&summary, kSummaryValue, value_msg);
  std::string event;
  PutDouble(&event, kEventWallTime, wall_time);
  PutInt64(&event, kEventStep, step);
  PutBytes(&event, kEventSummary, summary);
  return event;
}

}  // namespace tfevents

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& log_dir, const std::string& filename_suffix) {
  static std::atomic<uint64_t> writers_opened{0};
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(log_dir));
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::strcpy(host, "localhost");
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double wall_time = std::chrono::duration<double>(now).count();
  const int64_t seconds = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  const std::string name = "events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
                           std::to_string(::getpid()) + "." +
                           std::to_string(writers_opened.fetch_add(1)) + filename_suffix;
  const std::string path = JoinPath(log_dir, name);
  // "x": never append to or clobber another writer's file.
  std::FILE* f = std::fopen(path.c_str(), "wbxe");
  if (f == nullptr) {
    return IoError("cannot create TensorBoard event file " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(path, f));
  TENAX_RETURN_IF_ERROR(w->WriteRecord(tfevents::FileVersionEvent(wall_time)));
  TENAX_RETURN_IF_ERROR(w->Flush());
  return w;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

Status TensorBoardWriter::WriteRecord(std::string_view payload) {
  const std::string record = tfevents::FrameRecord(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return IoError("writing " + path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status TensorBoardWriter::AddScalar(const std::string& tag, int64_t step, float value,
                                    double wall_time) {
  return WriteRecord(tfevents::ScalarEvent(tag, step, value, wall_time));
}

Status TensorBoardWriter::Flush() {
  if (std::fflush(file_) != 0) return IoError("flushing " + path_ + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace tenax
