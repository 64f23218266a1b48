//===- HfExport.h - Checkpoints as Hugging Face models ----------*- C++ -*-===//
//
// `trellis export CHECKPOINT --hf DIR`: a checkpoint's weights written as a
// model `transformers.AutoModelForCausalLM.from_pretrained(DIR)` loads:
// `model.safetensors` (Hugging Face's parameter names, which checkpoints
// keep), `config.json` (the config the plan was compiled from, which the
// checkpoint carries) and `generation_config.json`.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_HFEXPORT_H
#define TRELLIS_RUNTIME_HFEXPORT_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>

namespace trellis::runtime {

struct HfExportOptions {
  /// A checkpoint, or the root of periodic ones (the newest is taken).
  std::string checkpoint;
  /// The directory to write (made if missing; the three files replaced).
  std::string outDir;
  /// "f32" (default): the fp32 master weights, exact; "bf16" or "f16":
  /// those rounded to nearest even, as a mixed-precision step computes.
  std::string dtype = "f32";
  /// A Hugging Face config.json to use instead of the checkpoint's (for
  /// checkpoints of plans compiled from MLIR, which carry none).
  std::string configPath;
};

/// What an export wrote.
struct HfExportSummary {
  std::string checkpoint;
  int64_t step = 0;
  int64_t tensors = 0;
  int64_t parameters = 0;
  std::string modelType;
};

/// Verifies the checkpoint (its manifest's sizes and CRCs), checks the
/// config against the weights (model type, vocabulary and width of the
/// embedding table), and writes the three files, each under a temporary
/// name and renamed. Errors say what was expected and what was found.
StatusOr<HfExportSummary> exportHuggingFace(const HfExportOptions &options);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_HFEXPORT_H
