//===- FusedProgram.cpp - Parsing fused_elementwise programs --------------===//

#include "trellis/Common/FusedProgram.h"

#include <cstdlib>
#include <sstream>

namespace trellis {

namespace {

bool parseType(const std::string &text, ElementType &type) {
  for (ElementType candidate :
       {ElementType::F32, ElementType::BF16, ElementType::F16})
    if (text == elementTypeName(candidate)) {
      type = candidate;
      return true;
    }
  return false;
}

} // namespace

Diagnostic parseFusedProgram(const std::vector<std::string> &program,
                             const std::vector<ElementType> &inputTypes,
                             FusedProgram &parsed) {
  parsed = FusedProgram();
  if (inputTypes.empty())
    return std::string("expected at least one input");
  for (ElementType type : inputTypes)
    if (type == ElementType::I32)
      return std::string("expected float inputs (f32, bf16, f16), found i32");
  if (program.empty())
    return std::string("expected a program of at least one instruction");
  parsed.slotTypes = inputTypes;
  for (size_t index = 0; index < program.size(); ++index) {
    std::istringstream words(program[index]);
    std::vector<std::string> tokens;
    for (std::string token; words >> token;)
      tokens.push_back(token);
    std::string where =
        "instruction " + std::to_string(index) + " '" + program[index] + "': ";
    if (tokens.empty())
      return where + "expected an op";
    FusedInstruction instruction;
    instruction.op = tokens[0];
    // The slot references and the other words, in order.
    auto slot = [&](const std::string &text, int &out) -> Diagnostic {
      char *end = nullptr;
      long value = text.size() > 1 && text[0] == '%'
                       ? std::strtol(text.c_str() + 1, &end, 10)
                       : -1;
      if (value < 0 || !end || *end != '\0' ||
          value >= static_cast<long>(parsed.slotTypes.size()))
        return where + "expected a slot %0 ... %" +
               std::to_string(parsed.slotTypes.size() - 1) + ", found '" +
               text + "'";
      out = static_cast<int>(value);
      return std::nullopt;
    };
    size_t slots = 0;
    size_t first = 1;
    // An instruction is a fusible row of the op table, read by its family.
    const OpContract *row = findOpContract(instruction.op);
    OpFamily family = row && row->fusible ? row->family : OpFamily::Fill;
    switch (family) {
    case OpFamily::Binary:
      instruction.kind = FusedInstruction::Kind::Binary;
      instruction.binary = *row->binaryFunction();
      slots = 2;
      break;
    case OpFamily::Scale:
      instruction.kind = FusedInstruction::Kind::Scale;
      slots = 1;
      break;
    case OpFamily::Unary:
      instruction.kind = FusedInstruction::Kind::Unary;
      instruction.unary = *row->unaryFunction();
      slots = 1;
      break;
    case OpFamily::UnaryGrad:
      instruction.kind = FusedInstruction::Kind::UnaryGrad;
      if (tokens.size() < 2 ||
          !findUnaryFunction(tokens[1].c_str(), instruction.unary))
        return where + "expected a unary function after unary_grad";
      instruction.function = tokens[1];
      first = 2;
      slots = 2;
      break;
    case OpFamily::Cast:
      instruction.kind = FusedInstruction::Kind::Cast;
      if (tokens.size() < 2 || !parseType(tokens[1], instruction.type))
        return where + "expected cast f32, bf16 or f16";
      first = 2;
      slots = 1;
      break;
    default:
      return where + "unknown op '" + instruction.op +
             "': expected add, sub, mul, div, maximum, scale, a unary "
             "function, unary_grad or cast";
    }
    size_t expected =
        first + slots + (instruction.kind == FusedInstruction::Kind::Scale);
    if (tokens.size() != expected)
      return where + "expected " + std::to_string(expected) +
             " words, found " + std::to_string(tokens.size());
    for (size_t i = 0; i < slots; ++i) {
      int operand = 0;
      if (Diagnostic diagnostic = slot(tokens[first + i], operand))
        return diagnostic;
      instruction.operands.push_back(operand);
    }
    if (instruction.kind == FusedInstruction::Kind::Scale) {
      char *end = nullptr;
      instruction.factor = std::strtod(tokens.back().c_str(), &end);
      if (!end || *end != '\0')
        return where + "expected a number, found '" + tokens.back() + "'";
    }
    if (instruction.kind != FusedInstruction::Kind::Cast) {
      instruction.type = parsed.slotTypes[instruction.operands[0]];
      for (int operand : instruction.operands)
        if (parsed.slotTypes[operand] != instruction.type)
          return where + "expected operands of one dtype, found " +
                 elementTypeName(instruction.type) + " and " +
                 elementTypeName(parsed.slotTypes[operand]);
    }
    parsed.slotTypes.push_back(instruction.type);
    parsed.instructions.push_back(std::move(instruction));
  }
  return std::nullopt;
}

} // namespace trellis
