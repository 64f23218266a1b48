//===- ModelImporter.h - Hugging Face configs to graph MLIR -----*- C++ -*-===//
//
// Builds the forward pass and loss of a decoder-only transformer from a
// Hugging Face `config.json` (GPT-2 or Llama) as a `func.func @forward` of
// graph ops. Parameters are arguments with role "param", their Hugging Face
// tensor name and their initializer; `tokens` and `targets` are i32 inputs
// of shape [batch, seq]; the single result is the mean cross-entropy.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_FRONTEND_MODELIMPORTER_H
#define TRELLIS_FRONTEND_MODELIMPORTER_H

#include "trellis/Frontend/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace trellis {

/// Shapes of one training batch.
struct BatchShape {
  int64_t batch = 1;
  int64_t seq = 1;
};

/// Builds `func.func @forward` for `config` at `shape` into a new module.
/// Fails when the sequence is longer than the model's positions.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importTransformer(mlir::MLIRContext &context, const TransformerConfig &config,
                  const BatchShape &shape);

} // namespace trellis

#endif // TRELLIS_FRONTEND_MODELIMPORTER_H
