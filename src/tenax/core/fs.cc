#include "tenax/core/fs.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tenax {
namespace {

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("writing " + path + ": " + ErrnoText() + " (is the disk full?)");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string ParentDir(const std::string& path) {
  std::filesystem::path p(path);
  std::string parent = p.parent_path().string();
  return parent.empty() ? "." : parent;
}

Status LocalFileSystem::WriteFileAtomic(const std::string& path, std::string_view data) {
  // A unique temp name per writer: two processes writing the same path never share a temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create " + tmp + ": " + ErrnoText());
  Status st = WriteAll(fd, data, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = IoError("fsync " + tmp + ": " + ErrnoText());
  if (::close(fd) != 0 && st.ok()) st = IoError("close " + tmp + ": " + ErrnoText());
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = IoError("rename " + tmp + " -> " + path + ": " + ErrnoText());
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename is durable only once the directory entry is.
  return SyncDir(ParentDir(path));
}

Result<std::string> LocalFileSystem::ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("no such file: " + path);
    return IoError("cannot open " + path + ": " + ErrnoText());
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return IoError("reading " + path + ": " + ErrnoText());
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status LocalFileSystem::CreateDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return IoError("cannot create directory " + path + ": " + ec.message());
  return Status::Ok();
}

Status LocalFileSystem::RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return IoError("cannot remove " + path + ": " + ec.message());
  return Status::Ok();
}

Status LocalFileSystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return IoError("rename " + from + " -> " + to + ": " + ErrnoText());
  }
  return SyncDir(ParentDir(to));
}

bool LocalFileSystem::Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Result<std::vector<std::string>> LocalFileSystem::ListDir(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return NotFound("no such directory: " + dir);
    return IoError("cannot list " + dir + ": " + ec.message());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status LocalFileSystem::SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open directory " + dir + ": " + ErrnoText());
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return IoError("fsync directory " + dir + ": " + ErrnoText());
  return Status::Ok();
}

FileSystem& LocalFs() {
  static LocalFileSystem fs;
  return fs;
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("no such file: " + path);
    return IoError("cannot open " + path + ": " + ErrnoText());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return IoError("stat " + path + ": " + ErrnoText());
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return IoError("mmap " + path + ": " + ErrnoText());
    }
    m.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool HasSuffix(const std::string& path, const std::string& suffix) {
  return path.size() >= suffix.size() &&
         path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace tenax
