//===- TokenStream.cpp - Token files mapped as one stream -----------------===//

#include "TokenStream.h"

#include "trellis/Common/FileKind.h"

#include <fcntl.h>
#include <sys/mman.h>
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

/// The shard files of `path`: itself, or a directory's regular files that
/// are not hidden, in name order.
StatusOr<std::vector<std::string>> shardPaths(const std::string &path,
                                              const std::string &dtype) {
  if (whyNotDirectory(path).empty()) {
    std::vector<std::string> files;
    std::error_code error;
    for (const auto &entry : std::filesystem::directory_iterator(path, error)) {
      std::string name = entry.path().filename().string();
      if (!name.empty() && name[0] != '.' &&
          whyNotRegularFile(entry.path().string()).empty())
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

} // namespace

TokenStream::~TokenStream() {
  for (const Shard &shard : shards_)
    if (shard.bytes)
      munmap(const_cast<unsigned char *>(shard.bytes), shard.length);
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
  for (const std::string &file : *files) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
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
    void *mapped = mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
    int mapError = errno;
    ::close(fd);
    if (mapped == MAP_FAILED)
      return Status::error("cannot map token file '" + file +
                           "': " + std::strerror(mapError));
    Shard shard{static_cast<const unsigned char *>(mapped), length,
                stream->size_};
    stream->shards_.push_back(shard);
    stream->size_ += static_cast<int64_t>(length / stream->width_);
    // Every id inside the vocabulary, checked once here.
    size_t count = length / stream->width_;
    for (size_t i = 0; i < count; ++i) {
      uint32_t value = 0;
      std::memcpy(&value, shard.bytes + i * stream->width_, stream->width_);
      if (value >= static_cast<uint64_t>(vocabSize))
        return Status::error("token file '" + file + "': id " +
                             std::to_string(value) + " at position " +
                             std::to_string(i) +
                             " is outside the vocabulary [0, " +
                             std::to_string(vocabSize) + ")");
    }
    crc = crc32_z(crc, shard.bytes, length);
  }
  stream->crc32_ = static_cast<uint32_t>(crc);
  return stream;
}

void TokenStream::read(int64_t start, int64_t count, int32_t *out) const {
  // The shard holding `start`, then on across shard ends.
  size_t s = std::upper_bound(shards_.begin(), shards_.end(), start,
                              [](int64_t at, const Shard &shard) {
                                return at < shard.first;
                              }) -
             shards_.begin() - 1;
  for (int64_t i = 0; i < count; ++i) {
    int64_t at = start + i;
    while (at >=
           shards_[s].first + static_cast<int64_t>(shards_[s].length / width_))
      ++s;
    uint32_t value = 0;
    std::memcpy(&value, shards_[s].bytes + (at - shards_[s].first) * width_,
                width_);
    out[i] = static_cast<int32_t>(value);
  }
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
