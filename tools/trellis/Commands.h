//===- Commands.h - Subcommands of the trellis driver -----------*- C++ -*-===//
//
// Each subcommand lives in its own file: its llvm::cl::SubCommand, its
// options (registered with cl::sub), and a function that runs it and returns
// the process exit code.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_TOOLS_TRELLIS_COMMANDS_H
#define TRELLIS_TOOLS_TRELLIS_COMMANDS_H

#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

namespace trellis::driver {

/// The process's command line, as main received it (for `run` to start its
/// ranks with the same options).
std::vector<std::string> &commandLine();

/// `trellis groups`: prints the process groups of a mesh.
extern llvm::cl::SubCommand groupsCommand;
int runGroupsCommand();

/// `trellis import`: a Hugging Face config as MLIR.
extern llvm::cl::SubCommand importCommand;
int runImportCommand();

/// `trellis compile`: a model to a training plan.
extern llvm::cl::SubCommand compileCommand;
int runCompileCommand();

/// `trellis schedule`: simulates a pipeline schedule.
extern llvm::cl::SubCommand scheduleCommand;
int runScheduleCommand();

/// `trellis run`: trains a plan.
extern llvm::cl::SubCommand runCommand;
int runRunCommand();

} // namespace trellis::driver

#endif // TRELLIS_TOOLS_TRELLIS_COMMANDS_H
