//===- RunCommand.cpp - `trellis run`, `export` and `plot` ----------------===//
//
// Training and checkpoints belong to the runtime: `trellis run ARGS` and
// `trellis export ARGS` replace this process by `trellis-run ARGS` and
// `trellis-export ARGS` (installed next to `trellis`), which link no MLIR.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace trellis::driver {

// Listed in `trellis --help`; their options are the runtime tools', never
// parsed here.
llvm::cl::SubCommand runCommand("run",
                                "Train a compiled plan (runs trellis-run; "
                                "see 'trellis run --help')");
llvm::cl::SubCommand
    exportCommand("export", "Write a checkpoint as a Hugging Face model (runs "
                            "trellis-export; see 'trellis export --help')");

int execRuntimeTool(int argc, char **argv) {
  static int anchor;
  std::string self = llvm::sys::fs::getMainExecutable(argv[0], &anchor);
  std::string name = "trellis-" + std::string(argv[1]);
  llvm::SmallString<256> tool(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(tool, name);
  std::vector<char *> args{name.data()};
  args.insert(args.end(), argv + 2, argv + argc);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  int error = errno;
  llvm::WithColor::error(llvm::errs(), "trellis")
      << "cannot run '" << tool << "': " << std::strerror(error) << " (" << name
      << " is built with trellis, into the same directory)\n";
  return 1;
}

// Listed in `trellis --help`; its options are trellis.plot's.
llvm::cl::SubCommand plotCommand(
    "plot", "Draw a run's metrics (trellis run --metrics FILE.jsonl) as loss, "
            "learning-rate, gradient-norm and throughput curves (runs python3 "
            "-m trellis.plot; see 'trellis plot --help')");

int execPlotCommand(int argc, char **argv) {
  const char *python = std::getenv("TRELLIS_PYTHON");
  if (!python || !*python)
    python = "python3";
  std::vector<char *> args{const_cast<char *>(python), const_cast<char *>("-m"),
                           const_cast<char *>("trellis.plot")};
  args.insert(args.end(), argv + 2, argv + argc);
  args.push_back(nullptr);
  execvp(python, args.data());
  int error = errno;
  llvm::WithColor::error(llvm::errs(), "trellis")
      << "cannot run '" << python << "': " << std::strerror(error)
      << " (trellis plot needs a Python with the trellis package and "
         "matplotlib; TRELLIS_PYTHON names it)\n";
  return 1;
}

} // namespace trellis::driver
