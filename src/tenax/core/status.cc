#include "tenax/core/status.h"

namespace tenax {
namespace {
const char* CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kDataError:
      return "data error";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kInternal:
      return "internal error";
    case StatusCode::kNumerical:
      return "numerical error";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kPeerLost:
      return "peer lost";
    case StatusCode::kBusy:
      return "busy";
  }
  return "unknown";
}
}  // namespace

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status DataError(std::string m) { return Status(StatusCode::kDataError, std::move(m)); }
Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status Numerical(std::string m) { return Status(StatusCode::kNumerical, std::move(m)); }
Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status PeerLost(std::string m) { return Status(StatusCode::kPeerLost, std::move(m)); }
Status Busy(std::string m) { return Status(StatusCode::kBusy, std::move(m)); }

}  // namespace tenax
