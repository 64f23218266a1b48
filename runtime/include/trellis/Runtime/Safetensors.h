//===- Safetensors.h - Reading and writing .safetensors files ---*- C++ -*-===//
//
// The format: an 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets} (plus "__metadata__"), then
// the raw data. Trellis writes F32; it reads F32, F16 and BF16 (converted to
// f32). A file is untrusted input: offsets, sizes and shapes are checked.
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
};

struct SafetensorsFile {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads every tensor of `path` as f32.
StatusOr<SafetensorsFile> readSafetensors(const std::string &path);

/// Writes `file` (all tensors F32). Writes to a temporary name and renames,
/// so an interrupted save never leaves a truncated file under `path`.
Status writeSafetensors(const std::string &path, const SafetensorsFile &file);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_SAFETENSORS_H
