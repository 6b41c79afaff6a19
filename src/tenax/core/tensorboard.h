// TensorBoard event files written without TensorFlow or protobuf: TFRecord framing (length, CRC-32C
// of the length, payload, CRC-32C of the payload, both CRCs masked) around hand-encoded
// tensorflow.Event protos. `tensorboard --logdir` reads them as it reads PyTorch's SummaryWriter
// output. tests/tools/read_tfevents.py is an independent reader for checking them, and
// tensorboard's own EventAccumulator reads a run's tb/ to the same numbers as its metrics.jsonl
// (tests/train_e2e_test.cc).
// Non-goals: histograms, images, text, hparams (scalars are what a training curve needs); reading
// event files back (only tests do that).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "tenax/core/status.h"

namespace tenax {

namespace tfevents {
// The TFRecord CRC mask: CRCs of data that itself contains CRCs are hard to tell apart, so
// TFRecord rotates and offsets them: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskCrc(uint32_t crc);
// One TFRecord: uint64 LE length, uint32 LE masked CRC-32C of those 8 bytes, the payload,
// uint32 LE masked CRC-32C of the payload.
std::string FrameRecord(std::string_view payload);
// Serialized tensorflow.Event protos.
std::string FileVersionEvent(double wall_time);  // Event{wall_time, file_version}
std::string ScalarEvent(const std::string& tag, int64_t step, float value, double wall_time);
}  // namespace tfevents

// Thread safety: none; call from one thread. Not copyable; flushes and closes on destruction.
class TensorBoardWriter {
 public:
  // Creates `log_dir` if needed and a new file in it named
  // events.out.tfevents.<unix_seconds>.<hostname>.<pid>.<n><filename_suffix>, where n counts the
  // writers this process opened (so two in the same second do not collide). The first record is
  // the file-version event TensorBoard expects ("brain.Event:2").
  static Result<std::unique_ptr<TensorBoardWriter>> Open(const std::string& log_dir,
                                                         const std::string& filename_suffix = "");
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Buffers one scalar point; `wall_time` is seconds since the epoch (what TensorBoard's
  // "relative" and "wall" axes use).
  Status AddScalar(const std::string& tag, int64_t step, float value, double wall_time);
  // Hands buffered records to the kernel. Call once per logged step, so that a step's scalars
  // become visible together and a crash loses at most the current step.
  Status Flush();
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  Status WriteRecord(std::string_view payload);

  const std::string path_;
  std::FILE* file_;  // owned
};

}  // namespace tenax
