//===- MlirEntryFuzzer.cpp - libFuzzer target for MLIR input --------------===//
//
// The first byte chooses the parallel options (CompileForFuzzing.h); the
// rest is parsed as MLIR text and, when it verifies, compiled to a plan.
// Build and run with scripts/fuzz.sh mlir.
//
//===----------------------------------------------------------------------===//

#include "CompileForFuzzing.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  trellis::fuzz::prepareContext(context);
  // MLIR's lexer reads up to the NUL that ends every file it parses.
  std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  if (module)
    trellis::fuzz::compileForFuzzing(*module, data[0]);
  return 0;
}
