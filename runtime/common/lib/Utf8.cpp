//===- Utf8.cpp - Well-formed UTF-8 in messages ---------------------------===//

#include "trellis/Common/Utf8.h"

#include <cstdio>

namespace trellis {

size_t utf8CharacterLength(std::string_view text, size_t position) {
  if (position >= text.size())
    return 0;
  auto byte = static_cast<unsigned char>(text[position]);
  // Lead bytes of 2, 3 and 4 bytes (0xC0, 0xC1 and above 0xF4 start no
  // well-formed character).
  size_t length = byte < 0x80                    ? 1
                  : byte >= 0xC2 && byte <= 0xDF ? 2
                  : byte >= 0xE0 && byte <= 0xEF ? 3
                  : byte >= 0xF0 && byte <= 0xF4 ? 4
                                                 : 0;
  if (length == 0 || position + length > text.size())
    return 0;
  for (size_t i = 1; i < length; ++i)
    if ((static_cast<unsigned char>(text[position + i]) & 0xC0) != 0x80)
      return 0;
  return length;
}

std::string wellFormedUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t position = 0; position < text.size();) {
    size_t length = utf8CharacterLength(text, position);
    if (length) {
      out.append(text.substr(position, length));
      position += length;
      continue;
    }
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02X",
                  static_cast<unsigned char>(text[position]));
    out += escaped;
    ++position;
  }
  return out;
}

} // namespace trellis
