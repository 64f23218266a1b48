//===- GradientCheck.cpp - Finite-difference checks of autodiff -----------===//

#include "GradientCheck.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/Initializer.h"
#include "trellis/Target/Plan/PlanEmitter.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;

namespace trellis::testing {

namespace {

GradientCheckResult failWith(const std::string &message) {
  GradientCheckResult result;
  result.failure = message;
  return result;
}

} // namespace

GradientCheckResult checkGradients(ModuleOp module,
                                   const GradientCheckOptions &options) {
  MLIRContext *context = module.getContext();
  PassManager pm(context);
  TrainingOptions training;
  training.optimizer = std::nullopt;
  buildTrainingPipeline(pm, training);
  if (failed(pm.run(module)))
    return failWith("autodiff failed");
  auto step = module.lookupSymbol<func::FuncOp>("gradients");
  PlanMetadata metadata;
  FailureOr<llvm::json::Value> planJson = emitPlan(step, std::move(metadata));
  if (failed(planJson))
    return failWith("plan emission failed");
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *planJson;
  runtime::StatusOr<runtime::Plan> plan = runtime::parsePlan(text);
  if (!plan.ok())
    return failWith("plan rejected: " + plan.status().message());

  // The CPU backend: the check reads and writes its memory directly.
  runtime::StatusOr<const runtime::Backend *> cpu =
      runtime::findBackend("cpu");
  if (!cpu.ok())
    return failWith(cpu.status().message());
  runtime::StatusOr<std::unique_ptr<runtime::Device>> device =
      (*cpu)->createDevice({});
  if (!device.ok())
    return failWith(device.status().message());
  runtime::StatusOr<std::unique_ptr<runtime::Executor>> created =
      runtime::Executor::create(std::move(*plan), **device);
  if (!created.ok())
    return failWith(created.status().message());
  runtime::Executor &executor = **created;
  const runtime::Plan &p = executor.plan();
  // Parameters: seeded normals; inputs: ids in [0, 4) (tests keep their
  // vocabularies at least that large).
  for (size_t i = 0; i < p.arguments.size(); ++i) {
    runtime::Tensor &tensor = executor.argument(i);
    uint64_t key = runtime::streamKey(options.seed, p.arguments[i].name);
    for (int64_t e = 0; e < tensor.size(); ++e) {
      if (p.arguments[i].role == runtime::ArgumentRole::Input)
        tensor.i32()[e] = static_cast<int32_t>(runtime::mix64(key + e) % 4);
      else
        tensor.f32()[e] = static_cast<float>(options.paramScale *
                                             runtime::counterNormal(key, e));
    }
  }
  runtime::Status status = executor.run();
  if (!status.ok())
    return failWith("run failed: " + status.message());
  // Analytic gradients, copied before the perturbed runs overwrite them.
  std::vector<std::pair<int64_t, std::vector<float>>> analytic;
  for (size_t r = 0; r < p.results.size(); ++r)
    if (p.results[r].gradientOf) {
      const runtime::Tensor &g = executor.result(r);
      analytic.emplace_back(*p.results[r].gradientOf,
                            std::vector<float>(g.f32(), g.f32() + g.size()));
    }

  auto lossAt = [&](float *slot, float value, double &loss) -> bool {
    float saved = *slot;
    *slot = value;
    runtime::Status run = executor.run();
    *slot = saved;
    runtime::StatusOr<float> result = executor.loss();
    loss = result.ok() ? *result : 0;
    return run.ok() && result.ok();
  };

  GradientCheckResult result;
  for (auto &[argIndex, gradient] : analytic) {
    runtime::Tensor &param = executor.argument(argIndex);
    const std::string &name = p.arguments[argIndex].name;
    int64_t n = param.size();
    int samples = std::min<int64_t>(options.samplesPerParam, n);
    for (int s = 0; s < samples; ++s) {
      int64_t e =
          samples == n
              ? s
              : static_cast<int64_t>(
                    runtime::mix64(options.seed * 31 + s + argIndex * 1000) %
                    n);
      float *slot = param.f32() + e;
      float x = *slot;
      double h = options.step;
      double plus, minus, center;
      if (!lossAt(slot, x + h, plus) || !lossAt(slot, x - h, minus) ||
          !lossAt(slot, x, center))
        return failWith("run failed during finite differences");
      double numeric = (plus - minus) / (2 * h);
      // A kink (relu, max) between x - h and x + h makes the one-sided
      // slopes disagree: such a point has no derivative to compare.
      double right = (plus - center) / h, left = (center - minus) / h;
      double tolerance =
          options.absolute +
          options.relative * std::max(std::fabs(right), std::fabs(left));
      if (std::fabs(right - left) > 4 * tolerance + 10 * h) {
        ++result.skippedAtKinks;
        continue;
      }
      double a = gradient[e];
      double allowed =
          options.absolute +
          options.relative * std::max(std::fabs(a), std::fabs(numeric));
      if (std::fabs(a - numeric) > allowed)
        return failWith("gradient of " + name + "[" + std::to_string(e) +
                        "]: analytic " + std::to_string(a) + ", numeric " +
                        std::to_string(numeric));
      ++result.checked;
    }
  }
  if (result.checked == 0 || result.skippedAtKinks > result.checked)
    return failWith("too few elements checked (" +
                    std::to_string(result.checked) + ", " +
                    std::to_string(result.skippedAtKinks) + " at kinks)");
  return result;
}

GradientCheckResult checkGradients(const std::string &source,
                                   const GradientCheckOptions &options) {
  MLIRContext context;
  context.loadDialect<graph::GraphDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  if (!module)
    return failWith("could not parse the test module");
  return checkGradients(*module, options);
}

} // namespace trellis::testing
