//===- CudaLibraries.h - NVIDIA libraries loaded at run time ----*- C++ -*-===//
//
// The CUDA backend links none of NVIDIA's shared libraries: the same binary
// builds and runs on a machine without a GPU, and on a GPU machine finds
// the libraries where users have them. Each is opened with dlopen, as
// IREE's HAL does, from the first place that has it:
//   1. the directories of TRELLIS_CUDA_LIBRARY_PATH (colon-separated);
//   2. the dynamic linker's own search (LD_LIBRARY_PATH, ldconfig);
//   3. the CUDA toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda: lib64);
//   4. PyTorch's wheels: nvidia/cu13/lib, nvidia/nccl/lib and
//      nvidia/cudnn/lib under the site-packages of VIRTUAL_ENV,
//      CONDA_PREFIX, ~/.local and the system's Python installations.
// A library that is nowhere is an error naming every place tried.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CUDA_CUDALIBRARIES_H
#define TRELLIS_RUNTIME_CUDA_CUDALIBRARIES_H

#include "trellis/Runtime/Status.h"

#include <string>
#include <vector>

namespace trellis::runtime::cuda {

/// One shared library to find: its file names, most specific first
/// ("libnccl.so.2", "libnccl.so"), and the PyTorch wheel directory that
/// ships it ("cu13", "nccl", "cudnn").
struct LibrarySpec {
  std::string what;
  std::vector<std::string> fileNames;
  std::string wheelPackage;
};

/// cuBLASLt, NCCL, NVRTC and cuDNN as CUDA 13 names them, and the shared
/// CUDA runtime (cudnn-frontend's own calls go through it).
const LibrarySpec &cublasLtLibrary();
const LibrarySpec &ncclLibrary();
const LibrarySpec &nvrtcLibrary();
const LibrarySpec &cudnnLibrary();
const LibrarySpec &cudartLibrary();

/// The directories of TRELLIS_CUDA_LIBRARY_PATH, searched before the
/// dynamic linker's own search (those that exist).
std::vector<std::string> preferredLibraryDirectories();

/// The directories searched for `spec` after the dynamic linker's own
/// search, in order (those that exist).
std::vector<std::string> fallbackLibraryDirectories(const LibrarySpec &spec);

/// An opened library; closed when destroyed.
class SharedLibrary {
public:
  SharedLibrary() = default;
  SharedLibrary(SharedLibrary &&other) noexcept;
  SharedLibrary &operator=(SharedLibrary &&other) noexcept;
  SharedLibrary(const SharedLibrary &) = delete;
  SharedLibrary &operator=(const SharedLibrary &) = delete;
  ~SharedLibrary();

  /// Opens `spec` from the first place that has it, or an error naming
  /// every place tried and the dynamic linker's last complaint.
  static StatusOr<SharedLibrary> open(const LibrarySpec &spec);

  /// The address of `symbol`, or an error naming the library and symbol.
  StatusOr<void *> symbol(const char *name) const;

  /// Where it was found ("libnccl.so.2" for the linker's own search).
  const std::string &path() const { return path_; }

  /// The dynamic linker's handle (for a library that resolves its own
  /// symbols from it: cudnn-frontend).
  void *handle() const { return handle_; }

private:
  void *handle_ = nullptr;
  std::string path_;
  std::string what_;
};

/// Loads `symbol` from `library` into a function pointer `T`.
template <typename T>
Status loadSymbol(const SharedLibrary &library, const char *name, T &out) {
  StatusOr<void *> address = library.symbol(name);
  if (!address.ok())
    return address.status();
  out = reinterpret_cast<T>(*address);
  return Status::success();
}

} // namespace trellis::runtime::cuda

#endif // TRELLIS_RUNTIME_CUDA_CUDALIBRARIES_H
