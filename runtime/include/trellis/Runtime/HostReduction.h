//===- HostReduction.h - Elementwise reductions in host memory --*- C++ -*-===//
//
// out[i] = a[i] (sum | max | min) b[i] for buffers of any plan dtype, as
// the CPU backend and Gloo reduce: f32 and i32 natively, bf16 and f16 in
// fp32, rounded back to nearest even.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_HOSTREDUCTION_H
#define TRELLIS_RUNTIME_HOSTREDUCTION_H

#include "trellis/Runtime/Plan.h"

#include <cstddef>

namespace trellis::runtime {

/// The op table's (OpParameters.h).
using trellis::ReduceKind;

/// `out` may alias `a` or `b`.
void reduceElements(DType dtype, ReduceKind kind, void *out, const void *a,
                    const void *b, size_t count);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_HOSTREDUCTION_H
