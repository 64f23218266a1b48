//===- FileKind.cpp - What a path names, before it is read ----------------===//

#include "trellis/Common/FileKind.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

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

std::string writeRegularFile(const std::string &path,
                             const std::string &contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return std::strerror(errno);
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t wrote = ::write(fd, contents.data() + done, contents.size() - done);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote < 0) {
      std::string reason = std::strerror(errno);
      ::close(fd);
      return reason;
    }
    done += static_cast<size_t>(wrote);
  }
  if (::close(fd) != 0)
    return std::strerror(errno);
  return "";
}

std::string formatBytes(int64_t bytes) {
  if (bytes < (int64_t(1) << 20))
    return std::to_string(bytes) + " bytes";
  char text[32];
  bool gibibytes = bytes >= (int64_t(1) << 30);
  std::snprintf(text, sizeof text, "%.1f %s",
                static_cast<double>(bytes) /
                    (gibibytes ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0),
                gibibytes ? "GiB" : "MiB");
  return text;
}

namespace {

/// readRegularFileChunks, telling `sized` the file's size (within
/// `maxBytes`) before the first chunk.
std::string
readChunks(const std::string &path, int64_t maxBytes,
           const std::function<void(int64_t)> &sized,
           const std::function<void(const char *, size_t)> &consume) {
  if (std::string kind = whyNotRegularFile(path); !kind.empty())
    return kind;
  // O_NONBLOCK: a FIFO that took the file's place since it was examined
  // must not block the open (it is refused below); reads of a regular file
  // ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return std::string("cannot be read: ") + std::strerror(errno);
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return kNotRegularOnceOpened;
  }
  int64_t size = static_cast<int64_t>(info.st_size);
  if (size > maxBytes) {
    ::close(fd);
    return "is " + formatBytes(size) + ", more than the " +
           formatBytes(maxBytes) + " such a file may hold";
  }
  sized(size);
  std::vector<char> buffer(static_cast<size_t>(
      std::min<int64_t>(std::max<int64_t>(size, 1), int64_t(1) << 20)));
  int64_t done = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(
        std::min<int64_t>(size - done, static_cast<int64_t>(buffer.size())));
    ssize_t got = ::read(fd, buffer.data(), want);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      std::string reason = std::strerror(errno);
      ::close(fd);
      return "cannot be read: " + reason;
    }
    if (got == 0)
      break;
    consume(buffer.data(), static_cast<size_t>(got));
    done += got;
  }
  // One byte more would mean it grew.
  char extra;
  ssize_t more = done == size ? ::read(fd, &extra, 1) : 0;
  ::close(fd);
  if (done != size || more > 0)
    return "changed while it was read: " + std::to_string(size) +
           " bytes, then " + (more > 0 ? "more" : std::to_string(done));
  return "";
}

} // namespace

std::string readRegularFileChunks(
    const std::string &path, int64_t maxBytes,
    const std::function<void(const char *, size_t)> &consume) {
  return readChunks(
      path, maxBytes, [](int64_t) {}, consume);
}

std::string readRegularFile(const std::string &path, std::string &contents,
                            int64_t maxBytes) {
  contents.clear();
  return readChunks(
      path, maxBytes,
      [&](int64_t size) { contents.reserve(static_cast<size_t>(size)); },
      [&](const char *data, size_t size) { contents.append(data, size); });
}

} // namespace trellis
