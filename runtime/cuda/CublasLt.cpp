//===- CublasLt.cpp - Matrix products through cuBLASLt --------------------===//

#include "CublasLt.h"

#include <cstdint>
#include <string>

namespace trellis::runtime::cuda {

namespace {

Status blasFailure(const std::string &what, cublasStatus_t status) {
  return Status::error("cuda: cuBLASLt " + what + " failed (status " +
                       std::to_string(static_cast<int>(status)) + ")");
}

#define TRELLIS_BLAS_RETURN_IF_ERROR(call, what)                               \
  do {                                                                         \
    if (cublasStatus_t trellisBlasStatus = (call);                             \
        trellisBlasStatus != CUBLAS_STATUS_SUCCESS)                            \
      return blasFailure(what, trellisBlasStatus);                             \
  } while (0)

cudaDataType_t dataType(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

} // namespace

GemmPlan::~GemmPlan() {
  if (!owner_)
    return;
  for (cublasLtMatrixLayout_t layout : {a_, b_, d_})
    if (layout)
      owner_->layoutDestroy_(layout);
  if (operation_)
    owner_->descDestroy_(operation_);
}

StatusOr<std::unique_ptr<CublasLt>> CublasLt::load(bool tf32) {
  StatusOr<SharedLibrary> library = SharedLibrary::open(cublasLtLibrary());
  if (!library.ok())
    return library.status();
  std::unique_ptr<CublasLt> blas(new CublasLt());
  blas->library_ = std::move(*library);
  blas->tf32_ = tf32;
  TRELLIS_RETURN_IF_ERROR(blas->loadEntryPoints());
  TRELLIS_BLAS_RETURN_IF_ERROR(blas->create_(&blas->handle_), "cublasLtCreate");
  return blas;
}

Status CublasLt::loadEntryPoints() {
  TRELLIS_RETURN_IF_ERROR(loadSymbol(library_, "cublasLtCreate", create_));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(library_, "cublasLtDestroy", destroy_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtGetVersion", getVersion_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatmulDescCreate", descCreate_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatmulDescDestroy", descDestroy_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatmulDescSetAttribute", descSet_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatrixLayoutCreate", layoutCreate_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatrixLayoutDestroy", layoutDestroy_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatrixLayoutSetAttribute", layoutSet_));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(library_, "cublasLtMatmulPreferenceCreate",
                                     preferenceCreate_));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(
      library_, "cublasLtMatmulPreferenceDestroy", preferenceDestroy_));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(
      library_, "cublasLtMatmulPreferenceSetAttribute", preferenceSet_));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(library_, "cublasLtMatmulAlgoGetHeuristic", heuristic_));
  return loadSymbol(library_, "cublasLtMatmul", matmul_);
}

CublasLt::~CublasLt() {
  if (handle_)
    destroy_(handle_);
}

std::string CublasLt::describe() const {
  size_t version = getVersion_ ? getVersion_() : 0;
  return "cuBLASLt " + std::to_string(version) + " at " + library_.path();
}

StatusOr<std::unique_ptr<GemmPlan>>
CublasLt::plan(const GemmMapping &mapping, DType dtype, int64_t workspaceBytes,
               std::optional<DType> resultType) const {
  auto plan = std::make_unique<GemmPlan>();
  plan->owner_ = this;
  cublasComputeType_t compute = dtype == DType::F32 && tf32_
                                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
  TRELLIS_BLAS_RETURN_IF_ERROR(
      descCreate_(&plan->operation_, compute, CUDA_R_32F),
      "creating a matmul descriptor");
  cublasOperation_t transA = mapping.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t transB = mapping.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRELLIS_BLAS_RETURN_IF_ERROR(descSet_(plan->operation_,
                                        CUBLASLT_MATMUL_DESC_TRANSA, &transA,
                                        sizeof(transA)),
                               "setting TRANSA");
  TRELLIS_BLAS_RETURN_IF_ERROR(descSet_(plan->operation_,
                                        CUBLASLT_MATMUL_DESC_TRANSB, &transB,
                                        sizeof(transB)),
                               "setting TRANSB");
  auto layout = [&](cublasLtMatrixLayout_t &out, int64_t rows, int64_t columns,
                    int64_t leading, int64_t batchStride,
                    cudaDataType_t type) -> Status {
    TRELLIS_BLAS_RETURN_IF_ERROR(
        layoutCreate_(&out, type, static_cast<uint64_t>(rows),
                      static_cast<uint64_t>(columns), leading),
        "creating a matrix layout");
    if (mapping.batch > 1) {
      int32_t count = static_cast<int32_t>(mapping.batch);
      TRELLIS_BLAS_RETURN_IF_ERROR(
          layoutSet_(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                     sizeof(count)),
          "setting the batch count");
      TRELLIS_BLAS_RETURN_IF_ERROR(
          layoutSet_(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                     &batchStride, sizeof(batchStride)),
          "setting the batch stride");
    }
    return Status::success();
  };
  cudaDataType_t operands = dataType(dtype);
  TRELLIS_RETURN_IF_ERROR(layout(plan->a_, mapping.a.rows, mapping.a.columns,
                                 mapping.a.leading, mapping.a.batchStride,
                                 operands));
  TRELLIS_RETURN_IF_ERROR(layout(plan->b_, mapping.b.rows, mapping.b.columns,
                                 mapping.b.leading, mapping.b.batchStride,
                                 operands));
  TRELLIS_RETURN_IF_ERROR(
      layout(plan->d_, mapping.rows, mapping.columns, mapping.resultLeading,
             mapping.resultBatchStride, dataType(resultType.value_or(dtype))));
  cublasLtMatmulPreference_t preference = nullptr;
  TRELLIS_BLAS_RETURN_IF_ERROR(preferenceCreate_(&preference),
                               "creating a matmul preference");
  uint64_t workspace = static_cast<uint64_t>(workspaceBytes);
  cublasStatus_t status =
      preferenceSet_(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                     &workspace, sizeof(workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = heuristic_(handle_, plan->operation_, plan->a_, plan->b_, plan->d_,
                        plan->d_, preference, 1, &result, &found);
  preferenceDestroy_(preference);
  TRELLIS_BLAS_RETURN_IF_ERROR(status, "choosing an algorithm");
  if (found == 0)
    return Status::error("cuda: cuBLASLt offers no algorithm for a " +
                         std::string(dtypeName(dtype)) + " matmul of " +
                         std::to_string(mapping.columns) + " x " +
                         std::to_string(mapping.k) + " by " +
                         std::to_string(mapping.k) + " x " +
                         std::to_string(mapping.rows) + " (batch " +
                         std::to_string(mapping.batch) + ")");
  plan->algorithm_ = result.algo;
  return plan;
}

Status CublasLt::matmul(const GemmPlan &plan, const void *a, const void *b,
                        void *d, void *workspace, int64_t workspaceBytes,
                        cudaStream_t stream, float beta) const {
  const float alpha = 1.0f;
  TRELLIS_BLAS_RETURN_IF_ERROR(
      matmul_(handle_, plan.operation_, &alpha, a, plan.a_, b, plan.b_, &beta,
              d, plan.d_, d, plan.d_, &plan.algorithm_, workspace,
              static_cast<size_t>(workspaceBytes), stream),
      "matmul");
  return Status::success();
}

} // namespace trellis::runtime::cuda
