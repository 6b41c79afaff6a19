// A folder that lives exactly as long as the process that made it: removed when its owner ends,
// and, when the owner was killed before it could remove it, by the next process that claims a
// folder beside it. For RAM folders (/dev/shm) that nothing else would ever free.
//
// The owner holds an exclusive flock on <parent>/<name>.owner, a file beside the folder. The
// kernel releases a flock when its holder dies (even by SIGKILL), so a .owner file whose lock can
// be taken belongs to nobody: Claim removes such folders (and their .owner files) among the
// siblings that share its prefix, then makes its own. The lock is taken before the folder exists,
// so a live owner's folder is never swept.
//
// Non-goals: folders on filesystems without flock (it fails, naming the folder), sharing one
// folder between processes (each has its own), folders left by older tenax versions (no .owner
// file: they are never touched).
//
// Thread safety: an OwnedFolder is not shared; Claim may run in many processes at once.
#pragma once

#include <string>

#include "tenax/core/status.h"

namespace tenax {

class OwnedFolder {
 public:
  // Removes the ownerless folders <parent>/<prefix>* (see above), then creates <parent>/<name>
  // (which must start with `prefix`; it may exist, and is then kept as it is) and owns it.
  static Result<OwnedFolder> Claim(const std::string& parent, const std::string& prefix,
                                   const std::string& name);
  // How many ownerless folders the Claim that made this one removed.
  int swept() const { return swept_; }
  const std::string& path() const { return path_; }

  OwnedFolder(OwnedFolder&& other) noexcept;
  OwnedFolder& operator=(OwnedFolder&& other) noexcept;
  OwnedFolder(const OwnedFolder&) = delete;
  OwnedFolder& operator=(const OwnedFolder&) = delete;
  ~OwnedFolder();  // removes the folder, then its .owner file, then releases the lock

 private:
  OwnedFolder(int fd, std::string path, int swept)
      : fd_(fd), path_(std::move(path)), swept_(swept) {}
  void Release();

  int fd_ = -1;  // the flocked <path>.owner
  std::string path_;
  int swept_ = 0;
};

}  // namespace tenax
