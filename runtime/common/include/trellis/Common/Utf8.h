//===- Utf8.h - Well-formed UTF-8 in messages -------------------*- C++ -*-===//
//
// Messages quote what a user typed or a file held; a binding (Python)
// reads them as UTF-8. These keep a quoted character whole and write any
// byte outside a well-formed character as \xNN.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_UTF8_H
#define TRELLIS_COMMON_UTF8_H

#include <cstddef>
#include <string>
#include <string_view>

namespace trellis {

/// The bytes of the well-formed UTF-8 character starting at `position` of
/// `text` (1 for ASCII), or 0 where none starts there.
size_t utf8CharacterLength(std::string_view text, size_t position);

/// `text` with every byte outside a well-formed UTF-8 character written as
/// \xNN.
std::string wellFormedUtf8(std::string_view text);

} // namespace trellis

#endif // TRELLIS_COMMON_UTF8_H
