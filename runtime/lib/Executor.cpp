//===- Executor.cpp - Runs a plan's program on host buffers ---------------===//

#include "trellis/Runtime/Executor.h"

#include "../cpu/Kernels.h"
#include "trellis/Runtime/Collectives.h"
#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace trellis::runtime {

namespace {

/// Arena slots are 64-byte aligned.
constexpr int64_t kAlignment = 64;

int64_t alignedBytes(const BufferDesc &desc) {
  int64_t bytes = desc.numElements() * 4;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

} // namespace

int64_t Executor::planArena(std::vector<int64_t> &offsets) const {
  size_t count = plan_.buffers.size();
  offsets.assign(count, -1);
  std::vector<bool> persistent(count, false);
  for (const Argument &argument : plan_.arguments)
    persistent[argument.buffer] = true;
  for (const Result &result : plan_.results)
    persistent[result.buffer] = true;
  // Lifetimes in instruction indices, inclusive: an instruction's outputs
  // never share bytes with its inputs.
  std::vector<int64_t> first(count, -1), last(count, -1);
  for (size_t i = 0; i < plan_.program.size(); ++i) {
    for (int64_t output : plan_.program[i].outputs)
      first[output] = last[output] = i;
    for (int64_t input : plan_.program[i].inputs)
      last[input] = i;
  }
  std::vector<int64_t> temporaries;
  for (size_t b = 0; b < count; ++b)
    if (!persistent[b] && first[b] >= 0)
      temporaries.push_back(b);
  // Largest first; each at the lowest offset free during its lifetime.
  std::stable_sort(temporaries.begin(), temporaries.end(),
                   [&](int64_t a, int64_t b) {
                     return alignedBytes(plan_.buffers[a]) >
                            alignedBytes(plan_.buffers[b]);
                   });
  struct Placed {
    int64_t first, last, offset, bytes;
  };
  std::vector<Placed> placed;
  int64_t arena = 0;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (int64_t b : temporaries) {
    int64_t bytes = alignedBytes(plan_.buffers[b]);
    busy.clear();
    for (const Placed &p : placed)
      if (p.first <= last[b] && first[b] <= p.last)
        busy.emplace_back(p.offset, p.offset + p.bytes);
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto &[begin, end] : busy) {
      if (offset + bytes <= begin)
        break;
      offset = std::max(offset, end);
    }
    offsets[b] = offset;
    placed.push_back({first[b], last[b], offset, bytes});
    arena = std::max(arena, offset + bytes);
  }
  return arena;
}

Executor::Executor(Plan plan, Communicator *communicator)
    : plan_(std::move(plan)), communicator_(communicator) {
  std::vector<int64_t> offsets;
  arenaBytes_ = planArena(offsets);
  arena_.reset(new float[std::max<int64_t>(arenaBytes_ / 4, 1)]());
  buffers_.reserve(plan_.buffers.size());
  for (size_t b = 0; b < plan_.buffers.size(); ++b) {
    const BufferDesc &desc = plan_.buffers[b];
    void *data;
    if (offsets[b] >= 0) {
      data = reinterpret_cast<char *>(arena_.get()) + offsets[b];
    } else {
      // Arguments, results, and buffers no instruction writes.
      persistent_.emplace_back(new float[std::max<int64_t>(desc.numElements(), 1)]());
      persistentBytes_ += desc.numElements() * 4;
      data = persistent_.back().get();
    }
    buffers_.emplace_back(desc, data);
  }
}

Status Executor::run() {
  for (size_t i = 0; i < plan_.program.size(); ++i) {
    const Instruction &instruction = plan_.program[i];
    auto start = std::chrono::steady_clock::now();
    Status status =
        isCollective(instruction.op)
            ? runCollective(instruction, plan_.instructionAxes[i], buffers_,
                            communicator_)
            : cpu::runInstruction(instruction, buffers_,
                                  plan_.instructionAxes[i], communicator_);
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


} // namespace trellis::runtime
