//===- DiagnosticText.cpp - Diagnostics as compilers print them -----------===//

#include "trellis/Compiler/DiagnosticText.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"

using namespace mlir;

namespace trellis {

static void printLocation(Location location, llvm::raw_ostream &os) {
  if (auto file = llvm::dyn_cast<FileLineColLoc>(location)) {
    os << file.getFilename().getValue() << ":" << file.getLine() << ":"
       << file.getColumn();
    return;
  }
  if (auto name = llvm::dyn_cast<NameLoc>(location)) {
    os << name.getName().getValue();
    if (!llvm::isa<UnknownLoc>(name.getChildLoc())) {
      os << " (";
      printLocation(name.getChildLoc(), os);
      os << ")";
    }
    return;
  }
  os << location;
}

static void printOne(Diagnostic &diagnostic, llvm::raw_ostream &os) {
  if (!llvm::isa<UnknownLoc>(diagnostic.getLocation())) {
    printLocation(diagnostic.getLocation(), os);
    os << ": ";
  }
  switch (diagnostic.getSeverity()) {
  case DiagnosticSeverity::Error:
    os << "error: ";
    break;
  case DiagnosticSeverity::Warning:
    os << "warning: ";
    break;
  case DiagnosticSeverity::Remark:
    os << "remark: ";
    break;
  case DiagnosticSeverity::Note:
    os << "note: ";
    break;
  }
  os << diagnostic << "\n";
}

void printDiagnostic(Diagnostic &diagnostic, llvm::raw_ostream &os) {
  printOne(diagnostic, os);
  for (Diagnostic &note : diagnostic.getNotes())
    printOne(note, os);
}

} // namespace trellis
