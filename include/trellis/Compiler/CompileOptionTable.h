//===- CompileOptionTable.h - The options of `trellis compile` --*- C++ -*-===//
//
// Every option of CompileOptions declared once (trellis/Common/
// OptionTable.h): `trellis compile` makes its flags from these rows, the C
// API's trellisCompileOptionsSet* look their keys up here, and Python's
// trellis.compile takes them as keywords (trellis.compile_options() lists
// them through the C API).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMPILER_COMPILEOPTIONTABLE_H
#define TRELLIS_COMPILER_COMPILEOPTIONTABLE_H

#include "trellis/Common/OptionTable.h"
#include "trellis/Compiler/Compile.h"

#include <string>
#include <vector>

namespace trellis {

/// The rows, grouped as the help lists them.
const std::vector<OptionRow<CompileOptions>> &compileOptionTable();

/// Checks what a value alone can tell for options with a fixed set of
/// values (`emit`): "" or what was expected and found.
std::string checkCompileOptionValue(const OptionRow<CompileOptions> &row,
                                    const OptionValue &value);

} // namespace trellis

#endif // TRELLIS_COMPILER_COMPILEOPTIONTABLE_H
