//===- CudaLibraries.cpp - NVIDIA libraries loaded at run time ------------===//

#include "CudaLibraries.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace trellis::runtime::cuda {

namespace {

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool isFile(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

/// The paths matching `pattern`, sorted (glob's order).
std::vector<std::string> matching(const std::string &pattern) {
  std::vector<std::string> paths;
  glob_t found;
  if (::glob(pattern.c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i)
      paths.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  return paths;
}

std::string environment(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

} // namespace

const LibrarySpec &cublasLtLibrary() {
  static const LibrarySpec spec{
      "cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so"}, "cu13"};
  return spec;
}

const LibrarySpec &ncclLibrary() {
  static const LibrarySpec spec{"NCCL", {"libnccl.so.2", "libnccl.so"}, "nccl"};
  return spec;
}

const LibrarySpec &nvrtcLibrary() {
  static const LibrarySpec spec{
      "NVRTC", {"libnvrtc.so.13", "libnvrtc.so"}, "cu13"};
  return spec;
}

const LibrarySpec &cudnnLibrary() {
  static const LibrarySpec spec{
      "cuDNN", {"libcudnn.so.9", "libcudnn.so"}, "cudnn"};
  return spec;
}

const LibrarySpec &cudartLibrary() {
  static const LibrarySpec spec{
      "the CUDA runtime", {"libcudart.so.13", "libcudart.so"}, "cu13"};
  return spec;
}

std::vector<std::string> preferredLibraryDirectories() {
  std::vector<std::string> directories;
  std::string list = environment("TRELLIS_CUDA_LIBRARY_PATH");
  for (size_t begin = 0; begin <= list.size();) {
    size_t end = list.find(':', begin);
    if (end == std::string::npos)
      end = list.size();
    std::string directory = list.substr(begin, end - begin);
    if (!directory.empty() && isDirectory(directory))
      directories.push_back(directory);
    begin = end + 1;
  }
  return directories;
}

std::vector<std::string> fallbackLibraryDirectories(const LibrarySpec &spec) {
  std::vector<std::string> candidates;
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"})
    if (std::string root = environment(variable); !root.empty())
      candidates.push_back(root + "/lib64");
  candidates.push_back("/usr/local/cuda/lib64");
  // PyTorch's wheels.
  std::vector<std::string> prefixes;
  for (const char *variable : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (std::string prefix = environment(variable); !prefix.empty())
      prefixes.push_back(prefix);
  if (std::string home = environment("HOME"); !home.empty())
    prefixes.push_back(home + "/.local");
  for (const char *system : {"/usr/local", "/usr", "/opt/conda"})
    prefixes.push_back(system);
  for (const std::string &prefix : prefixes)
    for (const char *packages : {"site-packages", "dist-packages"})
      for (const std::string &directory :
           matching(prefix + "/lib/python3*/" + packages + "/nvidia/" +
                    spec.wheelPackage + "/lib"))
        candidates.push_back(directory);
  std::vector<std::string> directories;
  for (const std::string &directory : candidates)
    if (isDirectory(directory) &&
        std::find(directories.begin(), directories.end(), directory) ==
            directories.end())
      directories.push_back(directory);
  return directories;
}

SharedLibrary::SharedLibrary(SharedLibrary &&other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      path_(std::move(other.path_)), what_(std::move(other.what_)) {}

SharedLibrary &SharedLibrary::operator=(SharedLibrary &&other) noexcept {
  if (this != &other) {
    if (handle_)
      ::dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_)
    ::dlclose(handle_);
}

StatusOr<SharedLibrary> SharedLibrary::open(const LibrarySpec &spec) {
  std::vector<std::string> tried;
  std::string complaint;
  auto attempt = [&](const std::string &path) -> StatusOr<SharedLibrary> {
    // RTLD_NODELETE: NCCL and the CUDA driver start threads of their own
    // (ncclGetUniqueId's bootstrap root, the driver's callbacks) that may
    // still run when the handle closes; the code they run stays mapped.
    void *handle =
        ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
      const char *error = ::dlerror();
      complaint = error ? error : "";
      return Status::error(complaint);
    }
    SharedLibrary library;
    library.handle_ = handle;
    library.path_ = path;
    library.what_ = spec.what;
    return library;
  };
  auto inDirectories = [&](const std::vector<std::string> &directories)
      -> StatusOr<SharedLibrary> {
    for (const std::string &directory : directories) {
      tried.push_back(directory);
      for (const std::string &name : spec.fileNames)
        if (std::string path = directory + "/" + name; isFile(path))
          if (StatusOr<SharedLibrary> library = attempt(path); library.ok())
            return library;
    }
    return Status::error("not found");
  };
  if (StatusOr<SharedLibrary> library =
          inDirectories(preferredLibraryDirectories());
      library.ok())
    return library;
  tried.push_back("the dynamic linker's search (LD_LIBRARY_PATH, ldconfig)");
  for (const std::string &name : spec.fileNames)
    if (StatusOr<SharedLibrary> library = attempt(name); library.ok())
      return library;
  if (StatusOr<SharedLibrary> library =
          inDirectories(fallbackLibraryDirectories(spec));
      library.ok())
    return library;
  std::string names, places;
  for (const std::string &name : spec.fileNames)
    names += (names.empty() ? "" : " or ") + name;
  for (const std::string &place : tried)
    places += (places.empty() ? "" : ", ") + place;
  return Status::error(
      "cuda: " + spec.what + " (" + names + ") not found; looked in " + places +
      (complaint.empty() ? "" : " (last error: " + complaint + ")") +
      "; set TRELLIS_CUDA_LIBRARY_PATH to the directory that holds it");
}

StatusOr<void *> SharedLibrary::symbol(const char *name) const {
  ::dlerror();
  void *address = handle_ ? ::dlsym(handle_, name) : nullptr;
  if (!address)
    return Status::error("cuda: " + what_ + " at " + path_ + " has no " + name +
                         " (expected the CUDA 13 version)");
  return address;
}

} // namespace trellis::runtime::cuda
