//===- MemberNames.h - Finding a family's member by its name ----*- C++ -*-===//
//
// The op families' member lists (UnaryFunctions.h, BinaryFunctions.h) name
// each member as plans do; this finds the member a name gives. Host code
// only, without the C library's string functions.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_MEMBERNAMES_H
#define TRELLIS_COMMON_MEMBERNAMES_H

#include <cstddef>

namespace trellis {

/// Whether two NUL-terminated names are equal.
inline bool sameName(const char *a, const char *b) {
  while (*a && *a == *b)
    ++a, ++b;
  return *a == *b;
}

/// Sets `found` to the member of `members` that `nameOf` calls `name`;
/// false when none is.
template <typename Member, size_t Count, typename NameOf>
bool findMemberNamed(const char *name, const Member (&members)[Count],
                     NameOf nameOf, Member &found) {
  for (Member member : members)
    if (sameName(nameOf(member), name)) {
      found = member;
      return true;
    }
  return false;
}

} // namespace trellis

#endif // TRELLIS_COMMON_MEMBERNAMES_H
