//===- TokenStream.h - Token files mapped as one stream ---------*- C++ -*-===//
//
// A token file, or a directory of shards read in name order, checked once
// when opened (whole ids of the dtype, each inside the vocabulary) and then
// read window by window with pread: a file truncated or replaced while a
// run reads it is an error naming the file, never a SIGBUS of a mapping.
// Used by TokenSource.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_LIB_DATA_TOKENSTREAM_H
#define TRELLIS_RUNTIME_LIB_DATA_TOKENSTREAM_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime::data {

/// The ids of one component, shard after shard.
class TokenStream {
public:
  ~TokenStream();
  TokenStream(const TokenStream &) = delete;
  TokenStream &operator=(const TokenStream &) = delete;

  /// Opens `path` (a file, or a directory whose regular files, not hidden,
  /// are its shards in name order) and checks every id.
  static StatusOr<std::unique_ptr<TokenStream>>
  open(const std::string &path, const std::string &dtype, int64_t vocabSize);

  int64_t size() const { return size_; }
  /// Copies ids [start, start + count) (within size()) as int32; fails
  /// naming the file when it holds fewer bytes than when it was opened.
  Status read(int64_t start, int64_t count, int32_t *out) const;
  /// "file of N tokens, crc32 H" or "K files of N tokens, crc32 H" (the
  /// CRC-32 of the shards' bytes in order).
  std::string identity() const;
  const std::string &path() const { return path_; }

private:
  TokenStream() = default;
  struct Shard {
    std::string path;
    /// Open for the run's reads, or -1 when each read opens the file (a
    /// directory of more shards than the descriptors a process may spare).
    int fd = -1;
    /// Bytes when opened.
    size_t length = 0;
    /// Index of its first id in the stream.
    int64_t first = 0;
  };
  std::string path_;
  std::vector<Shard> shards_;
  size_t width_ = 2;
  int64_t size_ = 0;
  uint32_t crc32_ = 0;
};

} // namespace trellis::runtime::data

#endif // TRELLIS_RUNTIME_LIB_DATA_TOKENSTREAM_H
