//===- ImportCommand.cpp - `trellis import` -------------------------------===//
//
// Reads a Hugging Face config.json and writes the model's forward pass and
// loss as MLIR of graph ops.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand importCommand(
    "import", "Import a Hugging Face config.json as MLIR (forward and loss)");

namespace {
cl::OptionCategory importCategory("Model and batch");

cl::opt<std::string> importInput(cl::Positional, cl::desc("<config.json>"),
                                 cl::Required, cl::cat(importCategory), cl::sub(importCommand));
cl::opt<std::string> importOutput("o", cl::desc("Output MLIR file"),
                                  cl::value_desc("file"), cl::init("-"),
                                  cl::cat(importCategory), cl::sub(importCommand));
cl::opt<int64_t> importBatch("batch", cl::desc("Batch size"), cl::init(8),
                             cl::cat(importCategory), cl::sub(importCommand));
cl::opt<int64_t> importSeq("seq", cl::desc("Sequence length"), cl::init(64),
                           cl::cat(importCategory), cl::sub(importCommand));
} // namespace

int runImportCommand() {
  mlir::MLIRContext context;
  std::optional<LoadedModel> model =
      loadModel(context, importInput, {importBatch, importSeq}, "import");
  if (!model)
    return 1;
  return writeOutputFile(
      "import", "the model", importOutput,
      [&](llvm::raw_ostream &os) { model->module->print(os); });
}

} // namespace trellis::driver
