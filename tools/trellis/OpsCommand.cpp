//===- OpsCommand.cpp - `trellis ops` -------------------------------------===//
//
// Prints the plan op table (trellis/Compiler/OpTableDocs.h): the reference
// docs/Ops.md is this output.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "trellis/Compiler/OpTableDocs.h"
#include "llvm/Support/raw_ostream.h"

namespace trellis::driver {

llvm::cl::SubCommand
    opsCommand("ops", "Print the plan op table: every op's operands, results, "
                      "attributes, precision policy and effects (Markdown)");

int runOpsCommand() {
  llvm::outs() << opTableMarkdown();
  return 0;
}

} // namespace trellis::driver
