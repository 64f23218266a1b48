//===- TokenStream.cpp - Token files read as one stream -------------------===//

#include "TokenStream.h"

#include "trellis/Common/FileKind.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace trellis::runtime::data {

namespace {

/// The shard files of `path`: itself, or a directory's entries that are not
/// hidden, in name order. Each must be a regular file (a link to one
/// counts): a dangling link, a FIFO, a device or a directory among the
/// shards is an error naming it, never left out in silence (hide what is
/// no shard with a leading '.').
StatusOr<std::vector<std::string>> shardPaths(const std::string &path,
                                              const std::string &dtype) {
  if (whyNotDirectory(path).empty()) {
    std::vector<std::string> files;
    std::error_code error;
    for (const auto &entry : std::filesystem::directory_iterator(path, error)) {
      std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.')
        continue;
      if (std::string why = whyNotRegularFile(entry.path().string());
          !why.empty())
        return Status::error("token directory '" + path + "': shard '" + name +
                             "' " + why + ", expected a file of " + dtype +
                             " token ids (a name starting with '.' hides "
                             "what is no shard)");
      files.push_back(entry.path().string());
    }
    if (error)
      return Status::error("token directory '" + path +
                           "' cannot be listed: " + error.message());
    if (files.empty())
      return Status::error("token directory '" + path +
                           "' holds no files, expected shards of " + dtype +
                           " token ids");
    std::sort(files.begin(), files.end());
    return files;
  }
  if (std::string why = whyNotRegularFile(path); !why.empty())
    return Status::error("cannot open token file '" + path + "': it " + why +
                         ", expected a file of " + dtype + " token ids");
  return std::vector<std::string>{path};
}

/// Whether a stream of `shards` files keeps each open for its reads: at
/// most 256, and at most a quarter of the descriptors this process may hold
/// (RLIMIT_NOFILE, 1024 by default), so that a directory of thousands of
/// shards never runs out of them; beyond that each read opens its shard.
bool keepsShardsOpen(size_t shards) {
  struct rlimit files;
  rlim_t spare =
      ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
          ? files.rlim_cur / 4
          : 256;
  return shards <= std::min<rlim_t>(spare, 256);
}

/// Reads `length` bytes at `offset` of open file `fd` into `out`: "" or
/// why not (an error, or the file ending before them: truncated).
std::string readShard(int fd, size_t offset, size_t length,
                      unsigned char *out) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = ::pread(fd, out + done, length - done,
                          static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return std::string("cannot be read: ") + std::strerror(errno);
    if (got == 0)
      return "ends at byte " + std::to_string(offset + done) +
             ": it was truncated while the run reads it";
    done += static_cast<size_t>(got);
  }
  return "";
}

} // namespace

TokenStream::~TokenStream() {
  for (const Shard &shard : shards_)
    if (shard.fd >= 0)
      ::close(shard.fd);
}

StatusOr<std::unique_ptr<TokenStream>>
TokenStream::open(const std::string &path, const std::string &dtype,
                  int64_t vocabSize) {
  if (dtype != "uint16" && dtype != "uint32")
    return Status::error("expected token dtype uint16 or uint32, found '" +
                         dtype + "'");
  StatusOr<std::vector<std::string>> files = shardPaths(path, dtype);
  if (!files.ok())
    return files.status();
  std::unique_ptr<TokenStream> stream(new TokenStream());
  stream->path_ = path;
  stream->width_ = dtype == "uint16" ? 2 : 4;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> chunk(size_t(1) << 20);
  bool keepOpen = keepsShardsOpen(files->size());
  for (const std::string &file : *files) {
    // O_NONBLOCK: a FIFO put in the file's place is refused, not waited on.
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return Status::error("cannot open token file '" + file +
                           "': " + std::strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0) {
      int statError = errno;
      ::close(fd);
      return Status::error("cannot open token file '" + file +
                           "': " + std::strerror(statError));
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      return Status::error("cannot open token file '" + file + "': it " +
                           kNotRegularOnceOpened);
    }
    size_t length = static_cast<size_t>(info.st_size);
    if (length % stream->width_ != 0 || length == 0) {
      ::close(fd);
      return Status::error("token file '" + file + "' has " +
                           std::to_string(length) + " bytes, " +
                           (length == 0 ? std::string("no ids")
                                        : "not a multiple of " +
                                              std::to_string(stream->width_)) +
                           " (" + dtype + ")");
    }
    stream->shards_.push_back({file, fd, length, stream->size_});
    stream->size_ += static_cast<int64_t>(length / stream->width_);
    // Every id inside the vocabulary, checked once here, chunk by chunk.
    for (size_t offset = 0; offset < length; offset += chunk.size()) {
      size_t bytes = std::min(chunk.size(), length - offset);
      if (std::string why = readShard(fd, offset, bytes, chunk.data());
          !why.empty())
        return Status::error("token file '" + file + "' " + why);
      for (size_t i = 0; i < bytes / stream->width_; ++i) {
        uint32_t value = 0;
        std::memcpy(&value, chunk.data() + i * stream->width_, stream->width_);
        if (value >= static_cast<uint64_t>(vocabSize))
          return Status::error("token file '" + file + "': id " +
                               std::to_string(value) + " at position " +
                               std::to_string(offset / stream->width_ + i) +
                               " is outside the vocabulary [0, " +
                               std::to_string(vocabSize) + ")");
      }
      crc = crc32_z(crc, chunk.data(), bytes);
    }
    if (!keepOpen) {
      ::close(fd);
      stream->shards_.back().fd = -1;
    }
  }
  stream->crc32_ = static_cast<uint32_t>(crc);
  return stream;
}

Status TokenStream::read(int64_t start, int64_t count, int32_t *out) const {
  // The shard holding `start`, then on across shard ends.
  size_t s = std::upper_bound(shards_.begin(), shards_.end(), start,
                              [](int64_t at, const Shard &shard) {
                                return at < shard.first;
                              }) -
             shards_.begin() - 1;
  std::vector<unsigned char> bytes;
  for (int64_t done = 0; done < count;) {
    const Shard &shard = shards_[s];
    int64_t at = start + done;
    int64_t ids = static_cast<int64_t>(shard.length / width_);
    int64_t take = std::min(count - done, shard.first + ids - at);
    if (take <= 0) {
      ++s;
      continue;
    }
    bytes.resize(static_cast<size_t>(take) * width_);
    int fd = shard.fd;
    if (fd < 0) {
      fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd < 0)
        return Status::error("cannot open token file '" + shard.path +
                             "': " + std::strerror(errno));
    }
    std::string why =
        readShard(fd, static_cast<size_t>(at - shard.first) * width_,
                  bytes.size(), bytes.data());
    if (shard.fd < 0)
      ::close(fd);
    if (!why.empty())
      return Status::error("token file '" + shard.path + "' " + why +
                           " (it held " + std::to_string(shard.length) +
                           " bytes when opened)");
    for (int64_t i = 0; i < take; ++i) {
      uint32_t value = 0;
      std::memcpy(&value, bytes.data() + i * width_, width_);
      out[done + i] = static_cast<int32_t>(value);
    }
    done += take;
  }
  return Status::success();
}

std::string TokenStream::identity() const {
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", crc32_);
  std::string files = shards_.size() == 1
                          ? std::string("file")
                          : std::to_string(shards_.size()) + " files";
  return files + " of " + std::to_string(size_) + " tokens, crc32 " + crc;
}

} // namespace trellis::runtime::data
