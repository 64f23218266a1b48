//===- RunCommand.cpp - `trellis run` -------------------------------------===//
//
// Training belongs to the runtime: `trellis run ARGS` replaces this process
// by `trellis-run ARGS` (installed next to `trellis`), which links no MLIR.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trellis::driver {

// Listed in `trellis --help`; its options are trellis-run's, never parsed
// here.
llvm::cl::SubCommand runCommand("run", "Train a compiled plan (runs trellis-run; "
                                 "see 'trellis run --help')");

int execRunCommand(int argc, char **argv) {
  static int anchor;
  std::string self = llvm::sys::fs::getMainExecutable(argv[0], &anchor);
  llvm::SmallString<256> tool(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(tool, "trellis-run");
  std::vector<char *> args{const_cast<char *>("trellis-run")};
  args.insert(args.end(), argv + 2, argv + argc);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  int error = errno;
  llvm::WithColor::error(llvm::errs(), "trellis")
      << "cannot run '" << tool << "': " << std::strerror(error)
      << " (trellis-run is built with trellis, into the same directory)\n";
  return 1;
}

} // namespace trellis::driver
