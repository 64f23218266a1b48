//===- PlanFormat.h - The plan file's name and version, once ---*- C++ -*-===//
//
// What the compiler's emitter writes and the runtime's loader accepts
// (docs/PlanFormat.md). The version changes whenever a plan of one version
// would be misread by a runtime of another.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_PLANFORMAT_H
#define TRELLIS_COMMON_PLANFORMAT_H

#include <cstdint>

namespace trellis {

/// The plan's "format" field.
constexpr const char *kPlanFormatName = "trellis-plan";

/// The plan's "version" field: the one format version the emitter writes
/// and the runtime reads.
constexpr int64_t kPlanFormatVersion = 4;

} // namespace trellis

#endif // TRELLIS_COMMON_PLANFORMAT_H
