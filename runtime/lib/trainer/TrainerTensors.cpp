//===- TrainerTensors.cpp - A trainer's tensors by name -------------------===//
//
// Parameters by their names, optimizer states by adam_m., adam_v. and
// master. and a parameter's name: shapes, reads, views and writes of the
// whole tensors, whatever the rank holds of them.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Trainer.h"

#include "TensorNames.h"

#include <cmath>

namespace trellis::runtime {

const std::string kMasterPrefix = "master.";

const char *statePrefix(ArgumentRole role) {
  switch (role) {
  case ArgumentRole::AdamM:
    return "adam_m.";
  case ArgumentRole::AdamV:
    return "adam_v.";
  default:
    return kMasterPrefix.c_str();
  }
}

Status checkStoredTensor(const SafetensorsEntry &entry,
                         const ShardLayout &layout,
                         const std::vector<int64_t> &fileShape,
                         const std::string &name, const std::string &file) {
  const std::vector<int64_t> &stored =
      fileShape.empty() ? layout.globalShape : fileShape;
  if (entry.shape != stored) {
    std::string found, expected;
    for (int64_t s : entry.shape)
      found += (found.empty() ? "" : "x") + std::to_string(s);
    for (int64_t s : stored)
      expected += (expected.empty() ? "" : "x") + std::to_string(s);
    return Status::error(file + ": tensor \"" + name + "\" has shape [" +
                         found + "], the model expects [" + expected + "]");
  }
  for (size_t i = 0; i < entry.values.size(); ++i)
    if (!std::isfinite(entry.values[i]))
      return Status::error(file + ": tensor \"" + name + "\" holds " +
                           (std::isnan(entry.values[i]) ? "NaN" : "infinity") +
                           " at element " + std::to_string(i) +
                           ": refusing weights that are not finite");
  return Status::success();
}

int64_t Trainer::namedArgument(const std::string &name) const {
  const Plan &plan = executor_->plan();
  for (size_t i = 0; i < plan.arguments.size(); ++i) {
    const Argument &argument = plan.arguments[i];
    std::string prefix;
    switch (argument.role) {
    case ArgumentRole::Param:
    case ArgumentRole::State:
      break;
    case ArgumentRole::AdamM:
    case ArgumentRole::AdamV:
    case ArgumentRole::Master:
      prefix = statePrefix(argument.role);
      break;
    default:
      continue;
    }
    if (prefix + argument.name == name)
      return i;
  }
  return -1;
}

std::vector<std::string> Trainer::tensorNames() const {
  const Plan &plan = executor_->plan();
  std::vector<std::string> names;
  for (const Argument &argument : plan.arguments)
    if (argument.role == ArgumentRole::Param ||
        argument.role == ArgumentRole::State)
      names.push_back(argument.name);
    else if (argument.role == ArgumentRole::AdamM ||
             argument.role == ArgumentRole::AdamV ||
             argument.role == ArgumentRole::Master)
      names.push_back(statePrefix(argument.role) + argument.name);
  return names;
}

namespace {
Status unknownTensor(const std::string &name) {
  return Status::error("no tensor named \"" + name +
                       "\": expected a parameter's or state's name, or "
                       "adam_m., adam_v. or master. and a parameter's name");
}
} // namespace

StatusOr<std::vector<int64_t>>
Trainer::tensorShape(const std::string &name) const {
  int64_t argument = namedArgument(name);
  if (argument < 0)
    return unknownTensor(name);
  const Argument &desc = executor_->plan().arguments[argument];
  return desc.fileShape.empty() ? layoutOf(argument).globalShape
                                : desc.fileShape;
}

Status Trainer::readTensor(const std::string &name,
                           std::vector<float> &values) const {
  int64_t argument = namedArgument(name);
  if (argument < 0)
    return unknownTensor(name);
  SafetensorsEntry entry;
  TRELLIS_RETURN_IF_ERROR(gatherArgument(argument, entry));
  values = std::move(entry.values);
  return Status::success();
}

StatusOr<float *> Trainer::tensorView(const std::string &name) {
  int64_t argument = namedArgument(name);
  if (argument < 0)
    return unknownTensor(name);
  const Plan &plan = executor_->plan();
  const Argument &desc = plan.arguments[argument];
  std::string cannot = "tensor \"" + name + "\" has no view: ";
  if (!executor_->device().hostAddressable())
    return Status::error(cannot + "the " + executor_->device().name() +
                         " device's memory is not host memory (read copies "
                         "it)");
  if (plan.buffers[desc.buffer].dtype != DType::F32)
    return Status::error(cannot + "it is held in " +
                         dtypeName(plan.buffers[desc.buffer].dtype) +
                         ", a view is fp32");
  for (const std::vector<size_t> &axes : desc.sharding)
    if (!axes.empty())
      return Status::error(cannot + "it is split over the ranks (read "
                                    "gathers it)");
  if (!plan.holds(desc.stages))
    return Status::error(cannot + "this rank's pipeline stage does not hold "
                                  "it");
  // Unsplit: the buffer is the whole tensor (padding only comes with
  // splits).
  return executor_->argument(argument).f32();
}

Status Trainer::writeTensor(const std::string &name, const float *values,
                            int64_t count) {
  int64_t argument = namedArgument(name);
  if (argument < 0)
    return unknownTensor(name);
  const Plan &plan = executor_->plan();
  const Argument &desc = plan.arguments[argument];
  SafetensorsEntry entry;
  entry.shape =
      desc.fileShape.empty() ? layoutOf(argument).globalShape : desc.fileShape;
  int64_t expected = 1;
  for (int64_t size : entry.shape)
    expected *= size;
  if (count != expected)
    return Status::error("tensor \"" + name + "\" has " +
                         std::to_string(expected) + " elements, found " +
                         std::to_string(count) + " values");
  entry.values.assign(values, values + count);
  TRELLIS_RETURN_IF_ERROR(checkStoredTensor(entry, layoutOf(argument),
                                            desc.fileShape, name, "values"));
  if (!plan.holds(desc.stages))
    return Status::success();
  return writeBox(argument, entry.values);
}

Status Trainer::writeBox(size_t argument, const std::vector<float> &values) {
  std::vector<float> local(executor_->argument(argument).size());
  layoutOf(argument).forEach(
      [&](int64_t l, int64_t g) { local[l] = values[g]; });
  return executor_->writeArgumentValues(argument, local.data());
}

ShardLayout Trainer::layoutOf(size_t argument) const {
  const Plan &plan = executor_->plan();
  return ShardLayout::of(plan.buffers[plan.arguments[argument].buffer].shape,
                         plan.arguments[argument].sharding, planMesh(plan),
                         rank(), plan.arguments[argument].globalShape);
}

} // namespace trellis::runtime
