//===- StepResults.cpp - Results a pass adds to a training step -----------===//

#include "StepResults.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"

using namespace mlir;

void trellis::appendMetricResult(func::FuncOp step, Value value,
                                 llvm::StringRef metric) {
  Builder builder(step.getContext());
  Operation *terminator = step.getBody().front().getTerminator();
  terminator->insertOperands(terminator->getNumOperands(), value);
  SmallVector<Type> results(step.getResultTypes());
  results.push_back(value.getType());
  SmallVector<DictionaryAttr> resultAttrs;
  step.getAllResultAttrs(resultAttrs);
  resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
      graph::GraphDialect::kMetricAttrName, builder.getStringAttr(metric))));
  step.setType(builder.getFunctionType(step.getArgumentTypes(), results));
  step.setAllResultAttrs(resultAttrs);
}
