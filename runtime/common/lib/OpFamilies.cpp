//===- OpFamilies.cpp - Names of op families and their members ------------===//

#include "trellis/Common/OpFamilies.h"

namespace trellis {

const char *opFamilyName(OpFamily family) {
  switch (family) {
#define TRELLIS_OP_FAMILY_NAME(NAME, TEXT)                                     \
  case OpFamily::NAME:                                                         \
    return TEXT;
    TRELLIS_OP_FAMILIES(TRELLIS_OP_FAMILY_NAME)
#undef TRELLIS_OP_FAMILY_NAME
  }
  return "";
}

const char *computeClassName(ComputeClass computeClass) {
  switch (computeClass) {
  case ComputeClass::Gemm:
    return "gemm";
  case ComputeClass::Attention:
    return "attention";
  case ComputeClass::MemoryBound:
    return "memory-bound";
  case ComputeClass::Communication:
    return "communication";
  }
  return "";
}

const char *collectiveKindName(CollectiveKind kind) {
  switch (kind) {
#define TRELLIS_COLLECTIVE_NAME(NAME, TEXT)                                    \
  case CollectiveKind::NAME:                                                   \
    return TEXT;
    TRELLIS_COLLECTIVE_KINDS(TRELLIS_COLLECTIVE_NAME)
#undef TRELLIS_COLLECTIVE_NAME
  }
  return "";
}

bool findCollectiveKind(const std::string &name, CollectiveKind &kind) {
#define TRELLIS_COLLECTIVE_MATCH(NAME, TEXT)                                   \
  if (name == TEXT) {                                                          \
    kind = CollectiveKind::NAME;                                               \
    return true;                                                               \
  }
  TRELLIS_COLLECTIVE_KINDS(TRELLIS_COLLECTIVE_MATCH)
#undef TRELLIS_COLLECTIVE_MATCH
  return false;
}

} // namespace trellis
