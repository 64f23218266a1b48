//===- PlanCompile.cpp - Compiles a plan for the planner ------------------===//

#include "PlanCompile.h"

#include "trellis/Compiler/ModelSource.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/Timing.h"

#include <functional>

namespace trellis::planner {

namespace {

/// An MLIR context of the planner's own, whose first error (diagnostic or
/// compiler message) is kept.
struct PlanContext {
  mlir::MLIRContext context{mlir::MLIRContext::Threading::DISABLED};
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler;

  PlanContext()
      : handler(&context, [this](mlir::Diagnostic &diagnostic) {
          if (diagnostic.getSeverity() == mlir::DiagnosticSeverity::Error &&
              diagnostics.empty())
            diagnostics = diagnostic.str();
          return mlir::success();
        }) {
    loadCompilerDialects(context);
  }

  /// Keeps the compiler's first error message.
  std::function<void(MessageKind, const llvm::Twine &)> record =
      [this](MessageKind kind, const llvm::Twine &message) {
        if (kind != MessageKind::Warning && diagnostics.empty())
          diagnostics = message.str();
      };
  MessageSink sink() { return record; }

  std::optional<LoadedModel> load(const PlanRequest &request,
                                  llvm::StringRef modelText, BatchShape shape,
                                  std::string &error) {
    std::string parseOutput;
    llvm::raw_string_ostream parseStream(parseOutput);
    std::optional<LoadedModel> model =
        loadModelText(context, modelText, request.format, request.modelSource,
                      shape, sink(), parseStream);
    if (!model)
      error = diagnostics.empty() ? parseOutput : diagnostics;
    return model;
  }
};

} // namespace

CompileOptions compileOptionsOf(const PlanRequest &request,
                                const PlanChoice &choice) {
  CompileOptions options;
  options.batch = request.globalBatch;
  options.seq = request.seq;
  options.precision = request.precision;
  applyPlanChoice(options, request, choice);
  return options;
}

std::optional<CompiledModel> compilePlanModel(const PlanRequest &request,
                                              llvm::StringRef modelText,
                                              const CompileOptions &options,
                                              std::string &error) {
  PlanContext plan;
  std::optional<LoadedModel> model =
      plan.load(request, modelText,
                {options.batch / options.microBatches, options.seq}, error);
  if (!model)
    return std::nullopt;
  mlir::TimingScope timing;
  mlir::FailureOr<CompiledModel> compiled =
      compileModel(std::move(*model), options, plan.sink(), timing);
  if (mlir::failed(compiled)) {
    error = plan.diagnostics.empty() ? "the compiler refused the plan"
                                     : plan.diagnostics;
    return std::nullopt;
  }
  return std::move(*compiled);
}

std::optional<ModelPipelineCost> pipelineCostOf(const PlanRequest &request,
                                                llvm::StringRef modelText,
                                                int64_t sequences,
                                                std::string &error) {
  PlanContext plan;
  std::optional<LoadedModel> model =
      plan.load(request, modelText, {sequences, request.seq}, error);
  if (!model)
    return std::nullopt;
  auto forward = model->module->lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) {
    error = "expected a function @forward";
    return std::nullopt;
  }
  mlir::FailureOr<ModelPipelineCost> cost =
      computePipelineCost(forward, RooflineRates());
  if (mlir::failed(cost)) {
    error = plan.diagnostics.empty() ? "the pipeline cost failed"
                                     : plan.diagnostics;
    return std::nullopt;
  }
  return std::move(*cost);
}

} // namespace trellis::planner
