//===- Checkpoint.cpp - Checkpoints committed as a whole ------------------===//

#include "trellis/Runtime/Checkpoint.h"

#include "trellis/Common/FileKind.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

namespace trellis::runtime {

namespace {

using json = nlohmann::json;

constexpr const char *kManifest = "manifest.json";
/// A manifest names a few files with their sizes and checksums.
constexpr int64_t kMaxManifestBytes = int64_t(1) << 20;

/// `path` without trailing slashes ("ckpt/" names the directory "ckpt",
/// whose siblings are made next to it, not inside it); "/" stays.
std::string withoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  return path;
}

std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::vector<std::string> entriesOf(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *handle = ::opendir(dir.c_str())) {
    while (dirent *entry = ::readdir(handle))
      if (std::strcmp(entry->d_name, ".") && std::strcmp(entry->d_name, ".."))
        names.push_back(entry->d_name);
    ::closedir(handle);
  }
  std::sort(names.begin(), names.end());
  return names;
}

/// Removes a directory of plain files (a checkpoint).
void removeCheckpointDirectory(const std::string &dir) {
  for (const std::string &name : entriesOf(dir))
    std::remove((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
}

Status syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return Status::error("cannot open '" + path + "' to sync it: " +
                         std::strerror(errno));
  int result = ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (result != 0)
    return Status::error("cannot sync '" + path + "': " + std::strerror(error));
  return Status::success();
}

/// The size and CRC-32 of regular file `name` in `dir`, read in chunks; a
/// device, a FIFO or a link to one is refused unread.
StatusOr<CheckpointManifest::File> describeFile(const std::string &dir,
                                                const std::string &name) {
  std::string path = dir + "/" + name;
  CheckpointManifest::File file{name, 0, 0};
  uLong crc = crc32(0L, Z_NULL, 0);
  std::string why = readRegularFileChunks(
      path, std::numeric_limits<int64_t>::max(),
      [&](const char *data, size_t size) {
        crc = crc32(crc, reinterpret_cast<const Bytef *>(data),
                    static_cast<uInt>(size));
        file.bytes += size;
      });
  if (!why.empty())
    return Status::error("'" + path + "' " + why);
  file.crc32 = static_cast<uint32_t>(crc);
  return file;
}

/// The step `dir`'s manifest records, or -1 when it has no readable one.
int64_t manifestStep(const std::string &dir) {
  std::string text;
  if (!readRegularFile(dir + "/" + kManifest, text, kMaxManifestBytes).empty())
    return -1;
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("step") ||
      !root["step"].is_number_integer())
    return -1;
  return root["step"].get<int64_t>();
}

/// The step a checkpoint without a manifest (written before manifests)
/// holds: its name's, `step-<digits>`, when it holds model.safetensors;
/// else -1.
int64_t legacyStep(const std::string &dir) {
  std::string name = baseName(dir);
  if (name.size() <= 5 || name.size() > 5 + 18 ||
      !std::all_of(name.begin() + 5, name.end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      !whyNotRegularFile(dir + "/model.safetensors").empty())
    return -1;
  return std::stoll(name.substr(5));
}

void injectKill(bool now) {
  if (!now)
    return;
  std::fflush(stdout);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

} // namespace

void abandonCheckpoint(const std::string &partial) {
  removeCheckpointDirectory(partial);
}

StatusOr<std::string> beginCheckpoint(const std::string &dirGiven) {
  const std::string dir = withoutTrailingSlashes(dirGiven);
  std::string parent = parentOf(dir), prefix = baseName(dir) + ".partial-";
  for (const std::string &name : entriesOf(parent))
    if (name.rfind(prefix, 0) == 0) {
      std::fprintf(stderr,
                   "note: removing '%s/%s', left by an interrupted save\n",
                   parent.c_str(), name.c_str());
      removeCheckpointDirectory(parent + "/" + name);
    }
  std::string partial = dir + ".partial-" + std::to_string(::getpid());
  if (::mkdir(partial.c_str(), 0755) != 0)
    return Status::error("cannot create checkpoint directory '" + partial +
                         "': " + std::strerror(errno));
  return partial;
}

Status commitCheckpoint(const std::string &partial,
                        const std::string &dirGiven, int64_t step,
                        const std::string &model,
                        const std::vector<std::string> &files,
                        const CheckpointFault &fault) {
  const std::string dir = withoutTrailingSlashes(dirGiven);
  json manifest = {{"format", "trellis-checkpoint-1"},
                   {"step", step},
                   {"model", model},
                   {"files", json::array()}};
  for (const std::string &name : files) {
    injectKill(fault.afterFile == name);
    TRELLIS_RETURN_IF_ERROR(syncPath(partial + "/" + name));
    StatusOr<CheckpointManifest::File> file = describeFile(partial, name);
    if (!file.ok())
      return file.status();
    manifest["files"].push_back(
        {{"name", name}, {"bytes", file->bytes}, {"crc32", file->crc32}});
  }
  {
    // Written out and closed before the check: a full disk shows only
    // when the buffered text reaches the file.
    std::ofstream stream(partial + "/" + kManifest, std::ios::trunc);
    errno = 0;
    stream << manifest.dump(2) << "\n";
    stream.close();
    if (!stream)
      return Status::error("cannot write '" + partial + "/" + kManifest +
                           "': " + std::strerror(errno));
  }
  TRELLIS_RETURN_IF_ERROR(syncPath(partial + "/" + kManifest));
  TRELLIS_RETURN_IF_ERROR(syncPath(partial));
  injectKill(fault.beforeCommit);
  if (isDirectory(dir)) {
    // Swap the new checkpoint in and the old one out in one step, then
    // drop the old one.
    if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, dir.c_str(),
                    RENAME_EXCHANGE) == 0) {
      removeCheckpointDirectory(partial);
      return syncPath(parentOf(dir));
    }
    // A file system without the exchange: the old one aside first (a kill
    // between the renames leaves it as `<dir>.partial-<pid>.old`).
    std::string old = partial + ".old";
    if (::rename(dir.c_str(), old.c_str()) != 0)
      return Status::error("cannot replace checkpoint '" + dir +
                           "': " + std::strerror(errno));
    if (::rename(partial.c_str(), dir.c_str()) != 0) {
      std::string reason = std::strerror(errno);
      // The previous checkpoint goes back in place: a save that fails
      // loses nothing.
      bool restored = ::rename(old.c_str(), dir.c_str()) == 0;
      return Status::error(
          "cannot commit checkpoint '" + dir + "': " + reason +
          (restored ? " (the previous checkpoint is still there)"
                    : " (the previous checkpoint is at '" + old + "')"));
    }
    removeCheckpointDirectory(old);
    return syncPath(parentOf(dir));
  }
  if (::rename(partial.c_str(), dir.c_str()) != 0)
    return Status::error("cannot commit checkpoint '" + dir +
                         "': " + std::strerror(errno));
  return syncPath(parentOf(dir));
}

std::string periodicCheckpointPath(const std::string &rootGiven, int64_t step) {
  const std::string root = withoutTrailingSlashes(rootGiven);
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld",
                static_cast<long long>(step));
  return root + "/" + name;
}

namespace {

/// The committed `step-*` checkpoints under `root`, oldest first: ordered
/// by the step each one's manifest records (not by name: `step-%08lld`
/// gains a digit past step 10^8, and a directory may be renamed), ties by
/// name. A `step-*` directory that records no step (a stray directory, a
/// manifest that cannot be read) is no checkpoint: neither resumed nor
/// pruned.
std::vector<std::string> periodicCheckpoints(const std::string &root) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string &name : entriesOf(root)) {
    std::string dir = root + "/" + name;
    if (name.rfind("step-", 0) != 0 ||
        name.find(".partial-") != std::string::npos || !isDirectory(dir))
      continue;
    int64_t step = manifestStep(dir);
    if (step < 0 &&
        whyNotRegularFile(dir + "/" + kManifest) == "does not exist")
      step = legacyStep(dir);
    if (step >= 0)
      found.emplace_back(step, dir);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> ordered;
  for (auto &[step, dir] : found)
    ordered.push_back(std::move(dir));
  return ordered;
}

} // namespace

StatusOr<std::string> resolveCheckpoint(const std::string &pathGiven) {
  const std::string path = withoutTrailingSlashes(pathGiven);
  if (!isDirectory(path))
    return Status::error("checkpoint '" + path + "' is not a directory");
  struct stat info;
  if (::stat((path + "/" + kManifest).c_str(), &info) == 0 ||
      ::stat((path + "/model.safetensors").c_str(), &info) == 0)
    return path;
  std::vector<std::string> found = periodicCheckpoints(path);
  if (found.empty())
    return Status::error("checkpoint '" + path +
                         "' holds neither a checkpoint (manifest.json, "
                         "model.safetensors) nor step-* checkpoints");
  return found.back();
}

StatusOr<CheckpointManifest> verifyCheckpoint(const std::string &dir) {
  CheckpointManifest manifest;
  manifest.step = -1;
  std::string text;
  std::string path = dir + "/" + kManifest;
  if (std::string why = readRegularFile(path, text, kMaxManifestBytes);
      !why.empty()) {
    // A checkpoint written before manifests has none.
    if (why == "does not exist")
      return manifest;
    return Status::error("checkpoint '" + dir + "': its manifest '" + path +
                         "' " + why);
  }
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object() ||
      !root.value("step", json()).is_number_integer() ||
      !root.value("model", json()).is_string() ||
      !root.value("files", json()).is_array())
    return Status::error("checkpoint '" + dir +
                         "': malformed manifest.json (expected step, model "
                         "and files)");
  manifest.step = root["step"].get<int64_t>();
  manifest.model = root["model"].get<std::string>();
  for (const json &entry : root["files"]) {
    if (!entry.is_object() || !entry.value("name", json()).is_string() ||
        !entry.value("bytes", json()).is_number_unsigned() ||
        !entry.value("crc32", json()).is_number_unsigned())
      return Status::error("checkpoint '" + dir +
                           "': malformed manifest.json entry " + entry.dump());
    CheckpointManifest::File expected{entry["name"].get<std::string>(),
                                      entry["bytes"].get<uint64_t>(),
                                      entry["crc32"].get<uint32_t>()};
    std::string path = dir + "/" + expected.name;
    if (std::string why = whyNotRegularFile(path); !why.empty())
      return Status::error(
          "checkpoint '" + dir + "' is torn: its manifest (step " +
          std::to_string(manifest.step) + ") names " + expected.name +
          (why == "does not exist" ? ", which is missing"
                                   : ", but '" + path + "' " + why));
    StatusOr<CheckpointManifest::File> found = describeFile(dir, expected.name);
    if (!found.ok())
      return Status::error("checkpoint '" + dir +
                           "' is torn: its manifest "
                           "(step " +
                           std::to_string(manifest.step) + ") names " +
                           expected.name + ", but " + found.status().message());
    if (found->bytes != expected.bytes || found->crc32 != expected.crc32)
      return Status::error(
          "checkpoint '" + dir + "' is torn or mixed: " + expected.name +
          " is not the file its manifest (step " +
          std::to_string(manifest.step) + ") names (" +
          std::to_string(found->bytes) + " bytes, crc32 " +
          std::to_string(found->crc32) + "; expected " +
          std::to_string(expected.bytes) + " bytes, crc32 " +
          std::to_string(expected.crc32) + ")");
    manifest.files.push_back(expected);
  }
  return manifest;
}

Status pruneCheckpoints(const std::string &rootGiven, int64_t keep) {
  const std::string root = withoutTrailingSlashes(rootGiven);
  std::vector<std::string> found = periodicCheckpoints(root);
  for (size_t i = 0; i + keep < found.size(); ++i)
    removeCheckpointDirectory(found[i]);
  return Status::success();
}

Status prepareCheckpointPath(const std::string &dirGiven, bool periodic) {
  const std::string dir = withoutTrailingSlashes(dirGiven);
  std::string target = periodic ? dir : parentOf(dir);
  // The directories to make, innermost first, up to one that exists.
  std::vector<std::string> missing;
  std::string existing = target;
  while (!isDirectory(existing)) {
    struct stat info;
    if (::stat(existing.c_str(), &info) == 0)
      return Status::error("cannot save to '" + dir + "': '" + existing +
                           "' exists and is not a directory");
    missing.push_back(existing);
    std::string parent = parentOf(existing);
    if (parent == existing)
      break;
    existing = parent;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it)
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST)
      return Status::error("cannot save to '" + dir + "': cannot create '" +
                           *it + "' (" + std::strerror(errno) + ")");
  if (::access(target.c_str(), W_OK | X_OK) != 0)
    return Status::error("cannot save to '" + dir + "': '" + target +
                         "' is not writable (" + std::strerror(errno) + ")");
  struct stat info;
  if (!periodic && ::stat(dir.c_str(), &info) == 0 && !S_ISDIR(info.st_mode))
    return Status::error("cannot save to '" + dir +
                         "': it exists and is not a directory");
  return Status::success();
}

} // namespace trellis::runtime
