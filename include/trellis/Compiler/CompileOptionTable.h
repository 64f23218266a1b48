//===- CompileOptionTable.h - The options of `trellis compile` --*- C++ -*-===//
//
// Every option of CompileOptions declared once (trellis/Common/
// OptionTable.h), two ways: each row sets its field and reads it back, and
// a String row names the words it takes. `trellis compile` makes its flags
// from these rows, the C API's trellisCompileOptionsSet* look their keys up
// here, Python's trellis.compile takes them as keywords
// (trellis.compile_options() lists them through the C API), the compiler
// checks values by them, and the planner prints a plan's flags and
// keywords from them (changedOptions).
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

/// Checks every row's value in `options` by its choices and check: ""
/// when all hold, else the first that does not, as `--name: expected ...,
/// found ...`.
std::string checkCompileOptionValues(const CompileOptions &options);

} // namespace trellis

#endif // TRELLIS_COMPILER_COMPILEOPTIONTABLE_H
