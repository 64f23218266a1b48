//===- TensorNames.h - Names of a trainer's tensors in files -----*- C++
//-*-===//
//
// What the named-tensor access (TrainerTensors.cpp) and the checkpoints
// (TrainerCheckpoint.cpp) share: how optimizer states are named in
// optimizer.safetensors, and the check of a tensor read from a file.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_LIB_TRAINER_TENSORNAMES_H
#define TRELLIS_RUNTIME_LIB_TRAINER_TENSORNAMES_H

#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/Safetensors.h"
#include "trellis/Runtime/ShardLayout.h"

#include <string>
#include <vector>

namespace trellis::runtime {

/// optimizer.safetensors' name of a parameter's fp32 master weight (mixed
/// precision; model.safetensors then holds the compute-dtype copy).
extern const std::string kMasterPrefix;

/// optimizer.safetensors' name prefix of an optimizer state's tensors.
const char *statePrefix(ArgumentRole role);

/// Checks a whole tensor from a checkpoint or weights file: its shape (the
/// whole tensor's, or `fileShape` when given: the same elements stored
/// under another shape), and that every value is finite (a NaN or an
/// infinity would train on silently as NaN).
Status checkStoredTensor(const SafetensorsEntry &entry,
                         const ShardLayout &layout,
                         const std::vector<int64_t> &fileShape,
                         const std::string &name, const std::string &file);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_LIB_TRAINER_TENSORNAMES_H
