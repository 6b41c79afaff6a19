// Device-to-host copies that overlap training: what an asynchronous checkpoint of GPU state
// needs. The copies go into pinned (page-locked) host memory on a side CUDA stream, ordered after
// the work already queued on the device's current stream, and the constructor returns without
// waiting. The writer thread waits for them (Wait) before serializing; the trainer makes the
// compute stream wait for them (OrderBeforeCurrentStream) just before the optimizer overwrites
// the state they read, so they run under the next step's forward and backward.
// CPU tensors are taken as they are (no copy, nothing to wait for).
// Non-goals: several devices in one set (one rank, one GPU); copies to disk.
// Thread safety: construct and OrderBeforeCurrentStream on the training thread; Wait and host()
// from any one thread afterwards.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace tenax::model {

class HostCopies {
 public:
  explicit HostCopies(const std::vector<at::Tensor>& tensors);
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;
  ~HostCopies();

  // Whether any copy is in flight on a device (false for CPU tensors only).
  bool on_device() const { return done_ != nullptr; }
  // Blocks the calling thread until every copy has landed; then host() may be read.
  void Wait() const;
  // The copies, in the order given, on the CPU (pinned for device tensors).
  const std::vector<at::Tensor>& host() const { return host_; }
  // Makes the device's current stream wait for the copies (no host block).
  void OrderBeforeCurrentStream() const;

 private:
  std::vector<at::Tensor> host_;
  std::shared_ptr<void> done_;  // the CUDA event recorded after the copies; null: none
  int device_ = -1;
};

}  // namespace tenax::model
