//===- FileKind.h - What a path names, before it is read --------*- C++ -*-===//
//
// Reading a directory, a character device (/dev/zero), a FIFO or a socket
// as if it were a file hangs, exhausts memory or fails with an unrelated
// message; every loader asks first, or reads through readRegularFile.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_FILEKIND_H
#define TRELLIS_COMMON_FILEKIND_H

#include <cstdint>
#include <functional>
#include <string>

namespace trellis {

/// "" when `path` names a regular file (following symbolic links);
/// otherwise what it is instead, as a phrase: "does not exist", "is a
/// directory", "is a character device", "is a block device", "is a FIFO",
/// "is a socket", or "cannot be examined: <reason>".
std::string whyNotRegularFile(const std::string &path);

/// "" when `path` names a directory; otherwise the phrase as above
/// ("is a regular file" among them).
std::string whyNotDirectory(const std::string &path);

/// Reads the whole regular file `path` into `contents` when it holds at
/// most `maxBytes` bytes; "" on success, otherwise why not, as a phrase
/// ("is a directory", "is 198.0 MiB, more than the 64.0 MiB such a file
/// may hold", "cannot be read: <reason>", "changed while it was read: N
/// bytes, then M"). Opening never blocks (a FIFO put in the file's place
/// is refused, not waited on); the size comes from the open file itself
/// (never from a stream position, which is -1 or huge for what is not a
/// file), is checked against `maxBytes` before anything is allocated, and
/// the bytes read must match it.
std::string readRegularFile(const std::string &path, std::string &contents,
                            int64_t maxBytes);

/// The same, handing the file to `consume` in consecutive chunks instead
/// of holding it whole (checksums of checkpoint files).
std::string
readRegularFileChunks(const std::string &path, int64_t maxBytes,
                      const std::function<void(const char *, size_t)> &consume);

/// The largest config.json read (Hugging Face's are a few KiB; the largest
/// with tokenizer tables inlined, a few MiB).
constexpr int64_t kMaxConfigFileBytes = int64_t(16) << 20;
/// The largest model in MLIR text read (weights are never in it; a 405B
/// model's graph is a few MiB).
constexpr int64_t kMaxMlirFileBytes = int64_t(256) << 20;
/// The largest cluster file read (a few KiB of figures).
constexpr int64_t kMaxClusterFileBytes = int64_t(16) << 20;

/// Writes `contents` as the whole of file `path` (made, or truncated):
/// "" on success, otherwise the system's reason ("No space left on
/// device"); every write and the close are checked, so a full disk is
/// never silent.
std::string writeRegularFile(const std::string &path,
                             const std::string &contents);

/// What a path that was a regular file when examined is once opened (it
/// was replaced in between).
constexpr const char *kNotRegularOnceOpened =
    "is not a regular file once opened";

/// "3000 bytes", "198.0 MiB", "20.0 GiB".
std::string formatBytes(int64_t bytes);

} // namespace trellis

#endif // TRELLIS_COMMON_FILEKIND_H
