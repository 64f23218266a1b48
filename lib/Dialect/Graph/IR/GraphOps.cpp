//===- GraphOps.cpp - Graph ops: the dialect and its generated classes ----===//
////
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"

using namespace mlir;
using namespace trellis::graph;

#include "trellis/Dialect/Graph/IR/GraphEnums.cpp.inc"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.cpp.inc"
#include "trellis/Dialect/Graph/IR/GraphOpsDialect.cpp.inc"

void GraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "trellis/Dialect/Graph/IR/GraphOps.cpp.inc"
      >();
  registerAttributes();
}

#define GET_OP_CLASSES
#include "trellis/Dialect/Graph/IR/GraphOps.cpp.inc"
