//===- Initializer.cpp - Deterministic parameter initialization -----------===//

#include "trellis/Runtime/Initializer.h"

#include "trellis/Runtime/Executor.h"
#include "trellis/Runtime/ShardLayout.h"

#include <cmath>
#include <cstdlib>

namespace trellis::runtime {

uint64_t mix64(uint64_t value) {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

uint64_t streamKey(uint64_t seed, const std::string &name) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : name)
    hash = (hash ^ c) * 0x100000001b3ULL;
  return mix64(hash ^ mix64(seed));
}

double counterNormal(uint64_t key, uint64_t index) {
  // Box-Muller on two uniforms in (0, 1] derived from the counter.
  uint64_t a = mix64(key ^ (2 * index));
  uint64_t b = mix64(key ^ (2 * index + 1) ^ 0x5851f42d4c957f2dULL);
  double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740992.0;
  double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Status initializeArguments(Executor &executor, uint64_t seed, int64_t rank) {
  const Plan &plan = executor.plan();
  Mesh mesh = planMesh(plan);
  std::vector<float> values;
  for (size_t i = 0; i < plan.arguments.size(); ++i) {
    const Argument &argument = plan.arguments[i];
    if (argument.role == ArgumentRole::Input || !plan.holds(argument.stages))
      continue;
    const Tensor &tensor = executor.argument(i);
    int64_t n = tensor.size();
    values.resize(n);
    float *data = values.data();
    // Padding past the whole tensor (a split that does not divide) stays
    // zero.
    std::fill(data, data + n, 0.0f);
    ShardLayout layout = ShardLayout::of(tensor.shape(), argument.sharding,
                                         mesh, rank, argument.globalShape);
    if (argument.role == ArgumentRole::Step || argument.init == "zeros") {
      // Zeros already.
    } else if (argument.role == ArgumentRole::LossScale ||
               argument.init == "ones") {
      layout.forEach([&](int64_t local, int64_t) { data[local] = 1.0f; });
    } else {
      double std = std::strtod(argument.init.c_str() + 7, nullptr);
      uint64_t key = streamKey(seed, argument.name);
      layout.forEach([&](int64_t local, int64_t global) {
        data[local] = static_cast<float>(std * counterNormal(key, global));
      });
    }
    TRELLIS_RETURN_IF_ERROR(executor.writeArgumentValues(i, data));
  }
  return Status::success();
}

} // namespace trellis::runtime
