//===- OpRules.h - Builds the plan op table ---------------------*- C++ -*-===//

#ifndef TRELLIS_COMMON_LIB_OPRULES_H
#define TRELLIS_COMMON_LIB_OPRULES_H

#include "trellis/Common/OpContract.h"

namespace trellis {

/// Every plan op's contract, by name (OpRules.cpp).
std::map<std::string, OpContract> buildOpContracts();

} // namespace trellis

#endif // TRELLIS_COMMON_LIB_OPRULES_H
