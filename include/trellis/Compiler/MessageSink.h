//===- MessageSink.h - Where the compiler library's messages go -*- C++ -*-===//
//
// Compiling reports two kinds of trouble: MLIR diagnostics from the passes
// (on the context's diagnostic engine) and messages about what it was asked
// to do (options, files, model text) before any pass runs. The second kind
// goes to a MessageSink: the driver prints it as `trellis <command>:
// error: ...`; the C API keeps it as a status's text.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMPILER_MESSAGESINK_H
#define TRELLIS_COMPILER_MESSAGESINK_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"

namespace trellis {

enum class MessageKind {
  /// "what was expected, what was found".
  Error,
  /// A complete, located message: `--mesh:1:6: error: ...`, then the text
  /// and a caret under the column.
  LocatedError,
  Warning,
};

using MessageSink =
    llvm::function_ref<void(MessageKind kind, const llvm::Twine &message)>;

} // namespace trellis

#endif // TRELLIS_COMPILER_MESSAGESINK_H
