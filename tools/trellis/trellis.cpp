//===- trellis.cpp - The trellis driver -----------------------------------===//
//
// `trellis <subcommand> [options]`; `trellis <subcommand> --help` lists the
// options of one subcommand.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"

using namespace trellis::driver;

std::vector<std::string> &trellis::driver::commandLine() {
  static std::vector<std::string> line;
  return line;
}

int main(int argc, char **argv) {
  commandLine().assign(argv, argv + argc);
  llvm::InitLLVM initLLVM(argc, argv);
  if (!llvm::cl::ParseCommandLineOptions(
          argc, argv,
          "Trellis: compiles models into distributed training plans and runs "
          "them\n",
          &llvm::errs()))
    return 1;
  if (groupsCommand)
    return runGroupsCommand();
  if (importCommand)
    return runImportCommand();
  if (compileCommand)
    return runCompileCommand();
  if (runCommand)
    return runRunCommand();
  if (scheduleCommand)
    return runScheduleCommand();
  llvm::WithColor::error(llvm::errs(), "trellis")
      << "expected a subcommand (groups, import, compile, run, schedule); see "
         "'trellis --help'\n";
  return 1;
}
