//===- OpTableDocs.h - The plan op table as a document ----------*- C++ -*-===//
//
// docs/Ops.md is this text (`trellis ops` prints it; a test compares them),
// so the op reference cannot drift from the table.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMPILER_OPTABLEDOCS_H
#define TRELLIS_COMPILER_OPTABLEDOCS_H

#include <string>

namespace trellis {

/// Markdown: the op count, then one table row per op in id order with its
/// operands (and the element types each takes), results, attributes
/// (kind, required or optional), precision policy and effects.
std::string opTableMarkdown();

} // namespace trellis

#endif // TRELLIS_COMPILER_OPTABLEDOCS_H
