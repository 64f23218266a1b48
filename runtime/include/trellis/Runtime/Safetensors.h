//===- Safetensors.h - Reading and writing .safetensors files ---*- C++ -*-===//
//
// The format: an 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets} (plus "__metadata__"), then
// the raw data. Trellis reads and writes F32, F16 and BF16 (held as f32 in
// memory; written rounded to nearest even). A file is untrusted input:
// offsets, sizes and shapes are checked.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_SAFETENSORS_H
#define TRELLIS_RUNTIME_SAFETENSORS_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trellis::runtime {

struct SafetensorsEntry {
  std::vector<int64_t> shape;
  std::vector<float> values;
  /// The file's dtype: what was read, or what to write ("F32", "F16",
  /// "BF16").
  std::string dtype = "F32";
};

struct SafetensorsFile {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads every tensor of `path` as f32.
StatusOr<SafetensorsFile> readSafetensors(const std::string &path);

/// Stacked tensors (a mixture of experts' weights, [E, ...]) are stored as
/// Hugging Face checkpoints store them: one tensor per slice along the
/// first dimension, named by the stacked name with its one `*` replaced by
/// the slice's index (`model.layers.0.mlp.experts.*.up_proj.weight` is
/// `...experts.0.up_proj.weight`, `...experts.1...`).
bool isStackedName(const std::string &name);

/// The name of slice `index` of stacked tensor `name`.
std::string stackedPieceName(const std::string &name, int64_t index);

/// The stacked tensor `name` of `shape` (rank >= 1) assembled from its
/// pieces in `file`, or what is missing, misshapen or extra (`path` names
/// the file).
StatusOr<SafetensorsEntry> readStackedTensor(const SafetensorsFile &file,
                                             const std::string &path,
                                             const std::string &name,
                                             const std::vector<int64_t> &shape);

/// Replaces each stacked tensor of `file` by its pieces.
void splitStackedTensors(SafetensorsFile &file);

/// Writes `file`, each tensor in its dtype. Writes to a temporary name and renames,
/// so an interrupted save never leaves a truncated file under `path`.
Status writeSafetensors(const std::string &path, const SafetensorsFile &file);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_SAFETENSORS_H
