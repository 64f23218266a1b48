//===- Executor.cpp - Runs a plan's program on host buffers ---------------===//

#include "trellis/Runtime/Executor.h"

#include "../cpu/Kernels.h"

#include <chrono>
#include <cstring>

namespace trellis::runtime {

Executor::Executor(Plan plan) : plan_(std::move(plan)) {
  buffers_.reserve(plan_.buffers.size());
  for (const BufferDesc &desc : plan_.buffers)
    buffers_.emplace_back(desc);
}

Status Executor::run() {
  for (size_t i = 0; i < plan_.program.size(); ++i) {
    const Instruction &instruction = plan_.program[i];
    auto start = std::chrono::steady_clock::now();
    Status status = cpu::runInstruction(instruction, buffers_);
    if (profiling_) {
      auto &entry = profile_[instruction.op];
      entry.first += std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
      ++entry.second;
    }
    if (!status.ok())
      return status.withContext("instruction " + std::to_string(i) + " (" +
                                instruction.op + ")");
  }
  return Status::success();
}

void Executor::commitUpdates() {
  for (const Result &result : plan_.results) {
    if (!result.updates)
      continue;
    Tensor &target = argument(*result.updates);
    const Tensor &source = buffers_[result.buffer];
    std::memcpy(target.raw(), source.raw(), source.bytes());
  }
}

int64_t Executor::allocatedBytes() const {
  int64_t bytes = 0;
  for (const Tensor &tensor : buffers_)
    bytes += tensor.bytes();
  return bytes;
}

} // namespace trellis::runtime
