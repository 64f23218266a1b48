//===- JsonShape.h - Nesting and duplicate keys of JSON text ----*- C++ -*-===//
//
// JSON parsers that recurse overflow the stack on deeply nested input, and
// most keep one of two equal keys silently. A model config is a flat
// object: checkJsonShape scans its text once, without recursion, before
// it is parsed. Plain C++ (no exceptions thrown), shared by compiler and
// runtime.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_JSONSHAPE_H
#define TRELLIS_COMMON_JSONSHAPE_H

#include <string>
#include <string_view>

namespace trellis {

/// "" when `text` nests objects and arrays at most `maxDepth` deep and no
/// object repeats a key; otherwise what is wrong, as a sentence naming the
/// key or the depth and the byte offset. Malformed JSON is left to the
/// parser (this only counts brackets and compares keys outside strings).
std::string checkJsonShape(std::string_view text, int maxDepth);

} // namespace trellis

#endif // TRELLIS_COMMON_JSONSHAPE_H
