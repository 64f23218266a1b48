//===- CudaMatmul.cpp - matmul and matmul_accumulate: one cuBLASLt call ---===//

#include "CublasLt.h"
#include "CudaSupport.h"

namespace trellis::runtime::cuda {

namespace {

/// The descriptors and algorithm chosen when the plan loaded.
class PreparedMatmul : public PreparedLaunch {
public:
  GemmMapping mapping;
  std::unique_ptr<GemmPlan> plan;
};

GemmMapping mappingOf(const KernelArgs &args) {
  const MatmulParameters &parameters = parametersOf<MatmulParameters>(args);
  return mapMatmul(args.in(0).shape(), args.in(1).shape(),
                   parameters.transposeLhs, parameters.transposeRhs);
}

bool empty(const GemmMapping &mapping) {
  return mapping.rows == 0 || mapping.columns == 0 || mapping.k == 0 ||
         mapping.batch == 0;
}

StatusOr<std::unique_ptr<PreparedLaunch>> prepareMatmul(const KernelArgs &args,
                                                        CudaContext &context) {
  auto prepared = std::make_unique<PreparedMatmul>();
  prepared->mapping = mappingOf(args);
  if (!empty(prepared->mapping)) {
    // matmul_accumulate's total is f32 whatever its operands' type.
    StatusOr<std::unique_ptr<GemmPlan>> plan =
        context.blas->plan(prepared->mapping, args.in(0).desc().dtype,
                           context.workspaceBytes, args.out(0).desc().dtype);
    if (!plan.ok())
      return plan.status();
    prepared->plan = std::move(*plan);
  }
  return std::unique_ptr<PreparedLaunch>(std::move(prepared));
}

Status runMatmul(const KernelArgs &args, CudaContext &context) {
  // Prepared when the plan loaded; a launch without (a test) plans now.
  std::unique_ptr<PreparedLaunch> planned;
  const auto *prepared = dynamic_cast<const PreparedMatmul *>(args.prepared);
  if (!prepared) {
    StatusOr<std::unique_ptr<PreparedLaunch>> made =
        prepareMatmul(args, context);
    if (!made.ok())
      return made.status();
    planned = std::move(*made);
    prepared = static_cast<const PreparedMatmul *>(planned.get());
  }
  Tensor &out = args.out(0);
  // A matmul_accumulate adds its product to the step's total after the
  // step's first, which writes it.
  bool adds = rowOf(args).effects.accumulates &&
              !parametersOf<MatmulParameters>(args).first;
  if (empty(prepared->mapping)) {
    // No products, or sums over nothing: zeros (added to nothing).
    if (!adds)
      TRELLIS_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(out.raw(), 0, out.bytes(), context.stream),
          "zeroing an empty matmul's result");
    return Status::success();
  }
  // cuBLASLt's A is the rhs, its B the lhs (GemmMapping.h).
  return context.blas->matmul(*prepared->plan, args.in(1).raw(),
                              args.in(0).raw(), out.raw(), context.workspace,
                              context.workspaceBytes, context.stream,
                              adds ? 1.0f : 0.0f);
}

} // namespace

void registerMatmulKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::Matmul, {runMatmul, prepareMatmul});
}

} // namespace trellis::runtime::cuda
