//===- ModelConfig.h - Reading a Hugging Face config.json -------*- C++ -*-===//
//
// Reads the fields of a Hugging Face `config.json` that decide a decoder's
// graph, per model_type as transformers' configuration and modeling files
// read them.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_FRONTEND_MODELCONFIG_H
#define TRELLIS_FRONTEND_MODELCONFIG_H

#include "trellis/Frontend/TransformerConfig.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace trellis {

/// Parses and validates a config.json text. Errors name the field and say
/// what was expected and what was found.
llvm::Expected<TransformerConfig> parseTransformerConfig(llvm::StringRef json);

} // namespace trellis

#endif // TRELLIS_FRONTEND_MODELCONFIG_H
