//===- ConfigImportFuzzer.cpp - libFuzzer target for config import -------===//
//
// The first byte chooses the parallel options (CompileForFuzzing.h); the
// rest is a config.json, parsed, imported at batch 2 and sequence 4, and
// compiled to a plan. Models too large to compile within a fuzz iteration
// (more than 16 layers or 2^24 parameters) are only parsed. Build and run
// with scripts/fuzz.sh config.
//
//===----------------------------------------------------------------------===//

#include "CompileForFuzzing.h"

#include "mlir/IR/MLIRContext.h"
#include "trellis/Frontend/ModelImporter.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data + 1), size - 1);
  llvm::Expected<trellis::TransformerConfig> config =
      trellis::parseTransformerConfig(text);
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  if (config->numLayers > 16 || config->numParameters() > (int64_t(1) << 24))
    return 0;
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  trellis::fuzz::prepareContext(context);
  llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> module =
      trellis::importTransformer(context, *config, {2, 4});
  if (!module) {
    llvm::consumeError(module.takeError());
    return 0;
  }
  trellis::fuzz::compileForFuzzing(**module, data[0]);
  return 0;
}
