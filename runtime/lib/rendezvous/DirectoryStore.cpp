//===- DirectoryStore.cpp - A rendezvous store in a shared directory ------===//
//
// A key is a file named by the key, its bytes other than letters, digits,
// '-', '_' and '.' (but a leading one) written %XX. A value is written whole
// under a temporary name, then renamed: a reader never sees part of it. Reads
// poll for the file.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Rendezvous.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

namespace trellis::runtime {

namespace {

class DirectoryStore : public RendezvousStore {
public:
  explicit DirectoryStore(std::string dir) : dir_(std::move(dir)) {}

  Status set(const std::string &key, const std::vector<char> &value) override {
    std::string path = pathOf(key);
    StatusOr<std::string> written = writeTemporary(key, value);
    if (!written.ok())
      return written.status();
    const std::string &temporary = *written;
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      std::string error = std::strerror(errno);
      std::remove(temporary.c_str());
      return Status::error("store: cannot write " + path + ": " + error);
    }
    return Status::success();
  }

  StatusOr<std::vector<char>> get(const std::string &key,
                                  std::chrono::milliseconds timeout) override {
    std::string path = pathOf(key);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      std::ifstream in(path, std::ios::binary);
      if (in)
        return std::vector<char>(std::istreambuf_iterator<char>(in),
                                 std::istreambuf_iterator<char>());
      if (std::chrono::steady_clock::now() >= deadline)
        return Status::error("store: timed out waiting for " + key + " in " +
                             dir_);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  StatusOr<std::vector<char>> claim(const std::string &key,
                                    const std::vector<char> &value) override {
    // Written whole under a temporary name, then linked in: link() fails
    // when the key exists, atomically, as rename() would not.
    std::string path = pathOf(key);
    StatusOr<std::string> written = writeTemporary(key, value);
    if (!written.ok())
      return written.status();
    const std::string &temporary = *written;
    int linked = ::link(temporary.c_str(), path.c_str());
    int error = errno;
    std::remove(temporary.c_str());
    if (linked == 0)
      return value;
    if (error != EEXIST)
      return Status::error("store: cannot write " + path + ": " +
                           std::strerror(error));
    return get(key, std::chrono::milliseconds(0));
  }

private:
  /// `value` written whole under a fresh temporary name in the directory;
  /// that name.
  StatusOr<std::string> writeTemporary(const std::string &key,
                                       const std::vector<char> &value) {
    std::string temporary = dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" +
                            std::to_string(std::random_device()()) + "-" +
                            fileNameOf(key);
    std::ofstream out(temporary, std::ios::binary);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out.flush())
      return Status::error("store: cannot write " + temporary + ": " +
                           std::strerror(errno));
    return temporary;
  }

  static std::string fileNameOf(const std::string &key) {
    std::string name;
    for (unsigned char c : key) {
      if (std::isalnum(c) || c == '-' || c == '_' ||
          (c == '.' && !name.empty())) {
        name += static_cast<char>(c);
      } else {
        char escaped[4];
        std::snprintf(escaped, sizeof(escaped), "%%%02X", c);
        name += escaped;
      }
    }
    return name;
  }
  std::string pathOf(const std::string &key) const {
    return dir_ + "/" + fileNameOf(key);
  }

  std::string dir_;
};

} // namespace

std::unique_ptr<RendezvousStore> openDirectoryStore(const std::string &dir) {
  return std::make_unique<DirectoryStore>(dir);
}

std::unique_ptr<RendezvousStore>
openRendezvousStore(const RendezvousOptions &options) {
  if (options.storePort > 0)
    return connectTcpStore(options.storeHost, options.storePort,
                           options.jobToken, options.timeout);
  return openDirectoryStore(options.storeDir);
}

} // namespace trellis::runtime
