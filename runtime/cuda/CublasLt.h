//===- CublasLt.h - Matrix products through cuBLASLt ------------*- C++ -*-===//
//
// cuBLASLt, opened at run time (CudaLibraries.h): its entry points as
// function pointers, and one matmul of a GemmMapping. fp32 computes in fp32
// (no TF32 unless asked: fp32 plans then equal the CPU to 1e-5); bf16 and
// f16 in fp32 accumulation. The algorithm is chosen once per instruction
// when the plan loads (chooseAlgorithm) and reused by every launch.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_CUBLASLT_H
#define TRELLIS_RUNTIME_CUDA_CUBLASLT_H

#include "CudaLibraries.h"
#include "GemmMapping.h"

#include "trellis/Runtime/Backend.h"

#include <cublasLt.h>

#include <memory>
#include <optional>

namespace trellis::runtime::cuda {

/// A matmul's descriptors and chosen algorithm (destroyed with it).
class GemmPlan {
public:
  GemmPlan() = default;
  GemmPlan(const GemmPlan &) = delete;
  GemmPlan &operator=(const GemmPlan &) = delete;
  ~GemmPlan();

private:
  friend class CublasLt;
  const class CublasLt *owner_ = nullptr;
  cublasLtMatmulDesc_t operation_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algorithm_{};
};

class CublasLt {
public:
  /// Opens cuBLASLt and makes a handle; `tf32` lets fp32 products use TF32
  /// tensor cores.
  static StatusOr<std::unique_ptr<CublasLt>> load(bool tf32);
  ~CublasLt();

  /// Descriptors for `mapping` over `dtype` operands and `resultType`
  /// results (`dtype`'s when absent: matmul_accumulate's totals are f32),
  /// and the fastest algorithm cuBLASLt's heuristic offers within
  /// `workspaceBytes`.
  StatusOr<std::unique_ptr<GemmPlan>>
  plan(const GemmMapping &mapping, DType dtype, int64_t workspaceBytes,
       std::optional<DType> resultType = std::nullopt) const;

  /// d = a · b + beta d as `plan` says, on `stream`.
  Status matmul(const GemmPlan &plan, const void *a, const void *b, void *d,
                void *workspace, int64_t workspaceBytes, cudaStream_t stream,
                float beta = 0.0f) const;

  /// "cuBLASLt 13.x at PATH", for the device's description.
  std::string describe() const;

private:
  friend class GemmPlan;
  CublasLt() = default;
  Status loadEntryPoints();

  SharedLibrary library_;
  bool tf32_ = false;
  cublasLtHandle_t handle_ = nullptr;
  decltype(&cublasLtCreate) create_ = nullptr;
  decltype(&cublasLtDestroy) destroy_ = nullptr;
  decltype(&cublasLtGetVersion) getVersion_ = nullptr;
  decltype(&cublasLtMatmulDescCreate) descCreate_ = nullptr;
  decltype(&cublasLtMatmulDescDestroy) descDestroy_ = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) descSet_ = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate_ = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy_ = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layoutSet_ = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate_ = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy_ = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSet_ = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic_ = nullptr;
  decltype(&cublasLtMatmul) matmul_ = nullptr;
};

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_CUBLASLT_H
