//===- FileKind.h - What a path names, before it is read --------*- C++ -*-===//
//
// Reading a directory, a character device (/dev/zero), a FIFO or a socket
// as if it were a file hangs, exhausts memory or fails with an unrelated
// message; every loader asks first, or reads through readRegularFile.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_FILEKIND_H
#define TRELLIS_COMMON_FILEKIND_H

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

/// Reads the whole regular file `path` into `contents`; "" on success,
/// otherwise why not, as a phrase ("is a directory", "cannot be read:
/// <reason>", "changed while it was read: N bytes, then M"). The size comes
/// from the open file itself (never from a stream position, which is -1 or
/// huge for what is not a file), and the bytes read must match it.
std::string readRegularFile(const std::string &path, std::string &contents);

} // namespace trellis

#endif // TRELLIS_COMMON_FILEKIND_H
