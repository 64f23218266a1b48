//===- OpShapes.cpp - Plan instructions against the op contract -----------===//

#include "trellis/Runtime/OpShapes.h"

namespace trellis::runtime {

bool isCollective(const std::string &op) {
  const OpContract *contract = findOpContract(op);
  return contract && contract->collective;
}

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &shape,
                                      size_t rank) {
  std::vector<int64_t> own = rowMajorStrides(shape);
  std::vector<int64_t> strides(rank, 0);
  size_t lead = rank - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    strides[lead + d] = shape[d] == 1 ? 0 : own[d];
  return strides;
}

MatmulSizes matmulSizes(const std::vector<int64_t> &lhs,
                        const std::vector<int64_t> &rhs, bool transposeLhs,
                        bool transposeRhs) {
  MatmulSizes sizes;
  size_t rank = lhs.size();
  sizes.m = lhs[rank - (transposeLhs ? 1 : 2)];
  sizes.k = lhs[rank - (transposeLhs ? 2 : 1)];
  sizes.n = rhs[rhs.size() - (transposeRhs ? 2 : 1)];
  for (size_t d = 0; d + 2 < rank; ++d)
    sizes.batch *= lhs[d];
  sizes.sharedRhs = rhs.size() == 2;
  return sizes;
}

bool isPointToPoint(const Instruction &instruction) {
  return instruction.row().family == OpFamily::PointToPoint;
}

bool isSend(const Instruction &instruction) {
  return instruction.row().collectiveKind() == CollectiveKind::Send;
}

bool isLoss(const Instruction &instruction) {
  const OpContract &row = instruction.row();
  return row.family == OpFamily::Loss && !row.gradient;
}

Status validateInstruction(const Instruction &instruction,
                           const std::vector<BufferDesc> &buffers,
                           const std::vector<size_t> &axes, const Mesh &mesh) {
  const OpContract *contract = findOpContract(instruction.op);
  if (!contract)
    return Status::error("unknown op '" + instruction.op + "'");
  size_t inputs = instruction.inputs.size();
  size_t outputs = instruction.outputs.size();
  if (!contract->acceptsOperandCount(inputs) ||
      !contract->acceptsResultCount(outputs))
    return Status::error("expected " + contract->operandCountText() +
                         " inputs and " + contract->resultCountText() +
                         " outputs, found " + std::to_string(inputs) + " and " +
                         std::to_string(outputs));
  // Every attribute is one the op declares (a misspelt optional one would
  // otherwise be ignored silently).
  for (const auto &[name, value] : instruction.attrs) {
    bool declared = false;
    for (const AttrSpec &spec : contract->attrs)
      declared |= spec.name == name;
    if (!declared) {
      std::string names;
      for (const AttrSpec &spec : contract->attrs)
        names += (names.empty() ? "" : ", ") + spec.name;
      return Status::error("unknown attribute '" + name + "' (" +
                           instruction.op + " takes " +
                           (names.empty() ? "none" : names) + ")");
    }
  }
  std::vector<TensorType> types;
  types.reserve(inputs);
  for (int64_t input : instruction.inputs)
    types.push_back({buffers[input].shape, buffers[input].dtype});
  OpInstance instance(types, instruction.attrs, mesh.groupSize(axes),
                      axes.size());
  std::vector<TensorType> results;
  if (Diagnostic diagnostic = inferResults(*contract, instance, results))
    return Status::error(*diagnostic);
  // Optional results: the operands decide how many there are.
  if (contract->optionalResults && results.size() != outputs)
    return Status::error("expected " + std::to_string(results.size()) +
                         " outputs for these operands, found " +
                         std::to_string(outputs));
  // A rule may leave a result to the loader (a receive's buffer is its
  // send's, checked there): those are not compared here.
  for (size_t i = 0; i < results.size() && i < outputs; ++i) {
    const BufferDesc &found = buffers[instruction.outputs[i]];
    if (found.shape != results[i].shape || found.dtype != results[i].element)
      return Status::error(
          "expected output " + std::to_string(i) + " of shape " +
          formatShape(results[i].shape) + " (" +
          elementTypeName(results[i].element) + "), found " +
          formatShape(found.shape) + " (" + dtypeName(found.dtype) + ")");
  }
  return Status::success();
}

} // namespace trellis::runtime
