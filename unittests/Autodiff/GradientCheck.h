//===- GradientCheck.h - Finite-difference checks of autodiff ---*- C++ -*-===//
//
// Compiles a forward function (MLIR text, or an imported model) with the
// autodiff pass in gradient mode, runs it on the CPU runtime, and compares
// every analytic gradient element it samples with a central difference of
// the loss.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_UNITTESTS_AUTODIFF_GRADIENTCHECK_H
#define TRELLIS_UNITTESTS_AUTODIFF_GRADIENTCHECK_H

#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace trellis::testing {

struct GradientCheckOptions {
  /// Finite-difference step.
  double step = 1e-2;
  /// Accept |analytic - numeric| <= absolute + relative * max(|a|, |n|).
  double absolute = 2e-3;
  double relative = 2e-2;
  /// Elements sampled per parameter.
  int samplesPerParam = 12;
  /// Standard deviation of random parameter values.
  double paramScale = 1.0;
  uint64_t seed = 7;
};

/// The outcome: a failure message, or nullopt when every sample agreed.
struct GradientCheckResult {
  std::optional<std::string> failure;
  int checked = 0;
  int skippedAtKinks = 0;
};

/// Checks the gradients of `@forward` in `module` (which is consumed).
GradientCheckResult checkGradients(mlir::ModuleOp module,
                                   const GradientCheckOptions &options);

/// Parses `source` and checks it.
GradientCheckResult checkGradients(const std::string &source,
                                   const GradientCheckOptions &options);

} // namespace trellis::testing

#endif // TRELLIS_UNITTESTS_AUTODIFF_GRADIENTCHECK_H
