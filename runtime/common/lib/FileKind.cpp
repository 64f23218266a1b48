//===- FileKind.cpp - What a path names, before it is read ----------------===//

#include "trellis/Common/FileKind.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trellis {

namespace {

/// The kind phrase of a path that exists, or the reason it cannot be
/// examined; sets `mode` when it can.
std::string examine(const std::string &path, mode_t &mode) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return errno == ENOENT ? "does not exist"
                           : std::string("cannot be examined: ") +
                                 std::strerror(errno);
  mode = info.st_mode;
  if (S_ISREG(mode))
    return "is a regular file";
  if (S_ISDIR(mode))
    return "is a directory";
  if (S_ISCHR(mode))
    return "is a character device";
  if (S_ISBLK(mode))
    return "is a block device";
  if (S_ISFIFO(mode))
    return "is a FIFO";
  if (S_ISSOCK(mode))
    return "is a socket";
  return "is neither a file nor a directory";
}

} // namespace

std::string whyNotRegularFile(const std::string &path) {
  mode_t mode = 0;
  std::string kind = examine(path, mode);
  return S_ISREG(mode) ? "" : kind;
}

std::string whyNotDirectory(const std::string &path) {
  mode_t mode = 0;
  std::string kind = examine(path, mode);
  return S_ISDIR(mode) ? "" : kind;
}

std::string readRegularFile(const std::string &path, std::string &contents) {
  if (std::string kind = whyNotRegularFile(path); !kind.empty())
    return kind;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::string("cannot be read: ") + std::strerror(errno);
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return "is not a regular file once opened";
  }
  contents.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t got = ::read(fd, contents.data() + done, contents.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      std::string reason = std::strerror(errno);
      ::close(fd);
      return "cannot be read: " + reason;
    }
    if (got == 0)
      break;
    done += static_cast<size_t>(got);
  }
  // One byte more would mean it grew.
  char extra;
  ssize_t more = done == contents.size() ? ::read(fd, &extra, 1) : 0;
  ::close(fd);
  if (done != contents.size() || more > 0)
    return "changed while it was read: " + std::to_string(info.st_size) +
           " bytes, then " + (more > 0 ? "more" : std::to_string(done));
  return "";
}

} // namespace trellis
