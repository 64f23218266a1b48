//===- Checkpoint.h - Checkpoints committed as a whole ----------*- C++ -*-===//
//
// A checkpoint is a directory of files (model.safetensors,
// optimizer.safetensors) and a manifest.json written last that names each
// file with its size and CRC-32, the step and the model's fingerprint
// (torch.distributed.checkpoint's and Orbax's design). It is written into
// a temporary sibling (`<dir>.partial-<pid>`), every file and the
// directory synced, and then committed with one rename: atomically
// exchanged with the previous checkpoint where one exists (Linux
// renameat2), so that a kill at any moment leaves either the old or the
// new checkpoint whole. Loading verifies the manifest and refuses a torn or
// mixed checkpoint, naming the files and steps.
//
// With periodic saves, `root/step-<8 digits>` directories each hold one
// checkpoint; the last K are kept, older ones deleted after the new one is
// committed; loading a root takes its newest committed checkpoint.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CHECKPOINT_H
#define TRELLIS_RUNTIME_CHECKPOINT_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::runtime {

struct CheckpointManifest {
  int64_t step = 0;
  /// The plan's model fingerprint.
  std::string model;
  struct File {
    std::string name;
    uint64_t bytes = 0;
    uint32_t crc32 = 0;
  };
  std::vector<File> files;
};

/// Where a kill is injected (tests): after writing `file` into the
/// temporary directory, or just before the commit's rename.
struct CheckpointFault {
  std::string afterFile;
  bool beforeCommit = false;
};

/// Creates `<dir>.partial-<pid>`, after removing leftovers of interrupted
/// saves of `dir` (noting each on stderr); returns its path.
StatusOr<std::string> beginCheckpoint(const std::string &dir);

/// Removes what a failed save left in `partial` (its files, then the
/// directory): a save that fails leaves nothing behind.
void abandonCheckpoint(const std::string &partial);

/// Writes the manifest of `files` (in `partial`) for `step` and `model`,
/// syncs everything and commits `partial` as `dir`.
Status commitCheckpoint(const std::string &partial, const std::string &dir,
                        int64_t step, const std::string &model,
                        const std::vector<std::string> &files,
                        const CheckpointFault &fault = {});

/// The checkpoint to load from `path`: `path` itself, or the newest
/// committed `step-*` checkpoint under it.
StatusOr<std::string> resolveCheckpoint(const std::string &path);

/// Reads `dir`'s manifest and checks every file's size and CRC-32: an
/// error names the first file that does not match. A directory without a
/// manifest (written before manifests existed) gives an empty manifest
/// with step -1.
StatusOr<CheckpointManifest> verifyCheckpoint(const std::string &dir);

/// `root/step-<8 digits>`.
std::string periodicCheckpointPath(const std::string &root, int64_t step);

/// Deletes all but the newest `keep` committed checkpoints under `root`.
Status pruneCheckpoints(const std::string &root, int64_t keep);

/// Makes the directories a save into `dir` needs (its parent; `dir` too
/// when it is the root of periodic checkpoints) and fails unless this
/// process can create files there: before step 1, so that a run never
/// learns at its end that it cannot save.
Status prepareCheckpointPath(const std::string &dir, bool periodic);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_CHECKPOINT_H
