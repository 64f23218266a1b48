//===- TrainerCheckpoint.cpp - Sharded checkpoints of a trainer -----------===//
//
// Every rank's pieces gathered into whole tensors (model.safetensors,
// optimizer.safetensors), written by rank 0 as one atomic checkpoint
// (Checkpoint.h); loading scatters them back; weights files load alike.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Trainer.h"

#include "TensorNames.h"

#include "trellis/Runtime/Checkpoint.h"
#include "trellis/Runtime/HostCollectives.h"
#include "trellis/Runtime/Launcher.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>

#include <nlohmann/json.hpp>

namespace trellis::runtime {

using json = nlohmann::json;

Status Trainer::gatherArgument(size_t argument, SafetensorsEntry &entry) const {
  const Plan &plan = executor_->plan();
  const Argument &desc = plan.arguments[argument];
  ShardLayout layout = layoutOf(argument);
  entry.shape = desc.fileShape.empty() ? layout.globalShape : desc.fileShape;
  bool split = false;
  for (const std::vector<size_t> &axes : desc.sharding)
    split |= !axes.empty();
  bool everywhere = desc.stages.empty() || !plan.pipelineAxis;
  if ((!split && everywhere) || !communicator_) {
    entry.values.resize(executor_->argument(argument).size());
    return executor_->readArgumentValues(argument, entry.values.data());
  }
  // Every rank's shard (zeros from ranks of stages that do not hold it),
  // then each holder's placed at its box.
  Mesh mesh = planMesh(plan);
  int64_t shardSize = plan.buffers[desc.buffer].numElements();
  std::vector<float> mine(shardSize, 0.0f);
  if (plan.holds(desc.stages))
    TRELLIS_RETURN_IF_ERROR(
        executor_->readArgumentValues(argument, mine.data()));
  std::vector<float> shards(shardSize * mesh.size());
  TRELLIS_RETURN_IF_ERROR(allGatherHostValues(*device_, *communicator_,
                                              everyAxis(mesh), mine.data(),
                                              shards.data(), shardSize));
  int64_t total = 1;
  for (int64_t size : layout.globalShape)
    total *= size;
  entry.values.assign(total, 0.0f);
  for (int64_t r = 0; r < mesh.size(); ++r) {
    int64_t stage = stageOfRank(plan, r);
    if (!desc.stages.empty() &&
        std::find(desc.stages.begin(), desc.stages.end(), stage) ==
            desc.stages.end())
      continue;
    ShardLayout::of(plan.buffers[desc.buffer].shape, desc.sharding, mesh, r,
                    desc.globalShape)
        .forEach([&](int64_t l, int64_t g) {
          entry.values[g] = shards[r * shardSize + l];
        });
  }
  return Status::success();
}

StatusOr<std::vector<RankMemory>> Trainer::gatherMemory() const {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  constexpr int64_t kFigures = 3;
  std::vector<float> mine = {
      static_cast<float>(executor_->allocatedBytes() / 1048576.0),
      static_cast<float>(executor_->arenaBytes() / 1048576.0),
      static_cast<float>(usage.ru_maxrss / 1024.0)};
  std::vector<float> all = mine;
  if (communicator_) {
    const Mesh &mesh = communicator_->mesh();
    all.resize(kFigures * mesh.size());
    TRELLIS_RETURN_IF_ERROR(allGatherHostValues(*device_, *communicator_,
                                                everyAxis(mesh), mine.data(),
                                                all.data(), kFigures));
  }
  std::vector<RankMemory> figures;
  for (size_t r = 0; r + kFigures <= all.size(); r += kFigures)
    figures.push_back({all[r], all[r + 1], all[r + 2]});
  return figures;
}

Status Trainer::save(const std::string &dir,
                     const CheckpointFault &fault) const {
  StatusOr<CheckpointTensors> tensors = gatherCheckpoint();
  if (!tensors.ok())
    return tensors.status();
  return writeCheckpoint(dir, *tensors, fault);
}

StatusOr<Trainer::CheckpointTensors> Trainer::gatherCheckpoint() const {
  // Every rank takes part in gathering split tensors; rank 0 writes.
  // With mixed precision, model.safetensors holds the weights in the
  // compute dtype (what Hugging Face loads) and optimizer.safetensors the
  // fp32 master weights next to the moments (what resuming restores).
  CheckpointTensors gathered;
  SafetensorsFile &model = gathered.model, &optimizer = gathered.optimizer;
  const Plan &plan = executor_->plan();
  std::string precision = plan.metadataText("precision", "fp32");
  std::string computeDtype = precision == "bf16"   ? "BF16"
                             : precision == "fp16" ? "F16"
                                                   : "F32";
  for (size_t i = 0; i < plan.arguments.size(); ++i) {
    const Argument &argument = plan.arguments[i];
    if (argument.role == ArgumentRole::Input ||
        argument.role == ArgumentRole::Step ||
        argument.role == ArgumentRole::LossScale)
      continue;
    SafetensorsEntry entry;
    TRELLIS_RETURN_IF_ERROR(gatherArgument(i, entry));
    if (argument.role == ArgumentRole::State) {
      // The model's persistent buffers, f32 beside its weights.
      model.tensors[argument.name] = std::move(entry);
      continue;
    }
    if (argument.role != ArgumentRole::Param) {
      optimizer.tensors[statePrefix(argument.role) + argument.name] =
          std::move(entry);
      continue;
    }
    // An f32 parameter of a mixed-precision step (no master argument: it
    // is cast in the forward) is its own master weight.
    if (computeDtype != "F32" &&
        plan.buffers[argument.buffer].dtype == DType::F32)
      optimizer.tensors[kMasterPrefix + argument.name] = entry;
    entry.dtype = computeDtype;
    model.tensors[argument.name] = std::move(entry);
  }
  return gathered;
}

Status Trainer::writeCheckpoint(const std::string &dir,
                                const CheckpointTensors &tensors,
                                const CheckpointFault &fault) const {
  if (rank() != 0)
    return Status::success();
  StatusOr<std::string> partial = beginCheckpoint(dir);
  if (!partial.ok())
    return partial.status();
  Status written = writeCheckpointFiles(*partial, dir, tensors, fault);
  // A save that fails leaves no partial directory behind (a killed one
  // does: the next save removes it).
  if (!written.ok())
    abandonCheckpoint(*partial);
  return written;
}

Status Trainer::writeCheckpointFiles(const std::string &partial,
                                     const std::string &dir,
                                     const CheckpointTensors &tensors,
                                     const CheckpointFault &fault) const {
  const Plan &plan = executor_->plan();
  SafetensorsFile model = tensors.model, optimizer = tensors.optimizer;
  std::string step = std::to_string(completedSteps_);
  model.metadata = {{"format", "pt"},
                    {"trellis_step", step},
                    {"trellis_model", fingerprint()}};
  optimizer.metadata = {
      {"trellis_step", step},
      {"trellis_model", fingerprint()},
      {"trellis_optimizer_steps", std::to_string(optimizerSteps_)},
      {"trellis_data_position", std::to_string(dataPosition_)}};
  if (lossScale()) {
    char scale[32];
    std::snprintf(scale, sizeof(scale), "%.17g", lossScale_.scale);
    optimizer.metadata["trellis_loss_scale"] = scale;
    optimizer.metadata["trellis_clean_steps"] =
        std::to_string(lossScale_.cleanSteps);
    optimizer.metadata["trellis_skipped_steps"] =
        std::to_string(lossScale_.skippedSteps);
  }
  TRELLIS_RETURN_IF_ERROR(
      writeSafetensors(partial + "/model.safetensors", model));
  TRELLIS_RETURN_IF_ERROR(
      writeSafetensors(partial + "/optimizer.safetensors", optimizer));
  std::vector<std::string> files = {"model.safetensors",
                                    "optimizer.safetensors"};
  // The model's Hugging Face config, when the plan was compiled from one:
  // what `trellis export --hf` needs besides the weights.
  json metadata =
      json::parse(plan.metadataJson, nullptr, /*allow_exceptions=*/false);
  // The config's text as the compiler read it (plans of earlier versions:
  // the parsed object).
  const json *hfConfig = metadata.is_object() && metadata.contains("hf_config")
                             ? &metadata["hf_config"]
                             : nullptr;
  if (hfConfig && (hfConfig->is_string() || hfConfig->is_object())) {
    std::string path = partial + "/config.json";
    errno = 0;
    std::ofstream config(path);
    if (hfConfig->is_string())
      config << hfConfig->get<std::string>();
    else
      config << hfConfig->dump(2) << "\n";
    if (!config.flush())
      return Status::error("cannot write '" + path +
                           "': " + std::strerror(errno));
    files.push_back("config.json");
  }
  return commitCheckpoint(partial, dir, completedSteps_, fingerprint(), files,
                          fault);
}

Status Trainer::load(const std::string &path) {
  StatusOr<std::string> resolved = resolveCheckpoint(path);
  if (!resolved.ok())
    return resolved.status();
  const std::string &dir = *resolved;
  StatusOr<CheckpointManifest> manifest = verifyCheckpoint(dir);
  if (!manifest.ok()) {
    // Say which saves the files come from, where they say so.
    std::string steps;
    for (const char *name : {"model.safetensors", "optimizer.safetensors"}) {
      StatusOr<SafetensorsFile> file = readSafetensors(dir + "/" + name);
      if (file.ok() && file->metadata.count("trellis_step"))
        steps += std::string(steps.empty() ? "" : ", ") + name +
                 " is from step " + file->metadata["trellis_step"];
    }
    return steps.empty() ? manifest.status()
                         : Status::error(manifest.status().message() + " (" +
                                         steps + ")");
  }
  StatusOr<SafetensorsFile> model = readSafetensors(dir + "/model.safetensors");
  if (!model.ok())
    return model.status().withContext("checkpoint");
  StatusOr<SafetensorsFile> optimizer =
      readSafetensors(dir + "/optimizer.safetensors");
  if (!optimizer.ok())
    return optimizer.status().withContext("checkpoint");
  // Both files of one save (a manifest-less checkpoint has only their
  // steps to go by).
  const std::string &modelStep = model->metadata["trellis_step"],
                    &optimizerStep = optimizer->metadata["trellis_step"];
  if (modelStep != optimizerStep ||
      (manifest->step >= 0 && modelStep != std::to_string(manifest->step)))
    return Status::error(
        "checkpoint '" + dir +
        "' mixes saves: model.safetensors is from step " + modelStep +
        ", optimizer.safetensors from step " + optimizerStep +
        (manifest->step >= 0
             ? ", its manifest from step " + std::to_string(manifest->step)
             : std::string()));
  const Plan &plan = executor_->plan();
  // Everything is checked before anything is written: a checkpoint that is
  // refused leaves the state as it was.
  std::vector<std::pair<size_t, const std::vector<float> *>> writes;
  for (size_t i = 0; i < plan.arguments.size(); ++i) {
    const Argument &argument = plan.arguments[i];
    SafetensorsFile *file = nullptr;
    std::string name = argument.name, fileName;
    bool f32Param = argument.role == ArgumentRole::Param &&
                    plan.buffers[argument.buffer].dtype == DType::F32;
    bool hasMaster = optimizer->tensors.count(kMasterPrefix + argument.name);
    if ((f32Param || argument.role == ArgumentRole::Master) && hasMaster) {
      // A mixed-precision checkpoint: the fp32 master weight, exactly.
      file = &*optimizer;
      fileName = dir + "/optimizer.safetensors";
      name = kMasterPrefix + argument.name;
    } else if (argument.role == ArgumentRole::Param ||
               argument.role == ArgumentRole::Master ||
               argument.role == ArgumentRole::State) {
      // The weights themselves (an fp32 checkpoint's are exact masters) and
      // the model's persistent buffers.
      file = &*model;
      fileName = dir + "/model.safetensors";
    } else if (argument.role == ArgumentRole::AdamM ||
               argument.role == ArgumentRole::AdamV) {
      file = &*optimizer;
      fileName = dir + "/optimizer.safetensors";
      name = statePrefix(argument.role) + argument.name;
    } else {
      continue;
    }
    if (!plan.holds(argument.stages))
      continue;
    auto it = file->tensors.find(name);
    if (it == file->tensors.end())
      return Status::error("checkpoint: " + fileName + " has no tensor \"" +
                           name + "\": it was written for another model");
    TRELLIS_RETURN_IF_ERROR(checkStoredTensor(it->second, layoutOf(i),
                                              argument.fileShape, name,
                                              fileName)
                                .withContext("checkpoint"));
    writes.emplace_back(i, &it->second.values);
  }
  if (model->metadata["trellis_model"] != fingerprint())
    return Status::error("checkpoint '" + dir +
                         "' was written for another model (fingerprint " +
                         model->metadata["trellis_model"] + ", this plan " +
                         fingerprint() + ")");
  const std::string &step = model->metadata["trellis_step"];
  char *end = nullptr;
  long long steps = std::strtoll(step.c_str(), &end, 10);
  if (step.empty() || *end != '\0' || steps < 0)
    return Status::error("checkpoint '" + dir + "': malformed trellis_step \"" +
                         step + "\"");
  // Older checkpoints made an update every step.
  int64_t optimizerSteps = steps;
  DynamicLossScale restoredScale = lossScale_;
  auto counter = [&](const char *key, int64_t &value) -> Status {
    auto it = optimizer->metadata.find(key);
    if (it == optimizer->metadata.end())
      return Status::success();
    char *last = nullptr;
    long long parsed = std::strtoll(it->second.c_str(), &last, 10);
    if (it->second.empty() || *last != '\0' || parsed < 0)
      return Status::error("checkpoint '" + dir + "': malformed " + key +
                           " \"" + it->second + "\"");
    value = parsed;
    return Status::success();
  };
  TRELLIS_RETURN_IF_ERROR(counter("trellis_optimizer_steps", optimizerSteps));
  // Older checkpoints consumed one batch of this plan per step.
  int64_t dataPosition = steps * batch_;
  TRELLIS_RETURN_IF_ERROR(counter("trellis_data_position", dataPosition));
  if (lossScale()) {
    TRELLIS_RETURN_IF_ERROR(
        counter("trellis_clean_steps", restoredScale.cleanSteps));
    TRELLIS_RETURN_IF_ERROR(
        counter("trellis_skipped_steps", restoredScale.skippedSteps));
    auto it = optimizer->metadata.find("trellis_loss_scale");
    if (it != optimizer->metadata.end()) {
      char *last = nullptr;
      double scale = std::strtod(it->second.c_str(), &last);
      if (it->second.empty() || *last != '\0' || !(scale >= 1))
        return Status::error("checkpoint '" + dir +
                             "': malformed trellis_loss_scale \"" + it->second +
                             "\"");
      restoredScale.scale = scale;
    }
  }
  for (const auto &[argument, values] : writes)
    TRELLIS_RETURN_IF_ERROR(writeBox(argument, *values));
  completedSteps_ = steps;
  optimizerSteps_ = optimizerSteps;
  dataPosition_ = dataPosition;
  lossScale_ = restoredScale;
  return Status::success();
}

Status Trainer::loadWeights(const std::string &path) {
  StatusOr<SafetensorsFile> file = readSafetensors(path);
  if (!file.ok())
    return file.status();
  const Plan &plan = executor_->plan();
  // Checked whole before anything is written, as load.
  std::vector<std::pair<size_t, const std::vector<float> *>> writes;
  // Stacked parameters assembled from their per-slice tensors.
  std::deque<SafetensorsEntry> stacked;
  for (size_t i = 0; i < plan.arguments.size(); ++i) {
    const Argument &argument = plan.arguments[i];
    bool weights = argument.role == ArgumentRole::Param ||
                   argument.role == ArgumentRole::Master ||
                   argument.role == ArgumentRole::State;
    if (!weights || !plan.holds(argument.stages))
      continue;
    if (isStackedName(argument.name) && !layoutOf(i).globalShape.empty() &&
        !file->tensors.count(argument.name)) {
      StatusOr<SafetensorsEntry> entry = readStackedTensor(
          *file, path, argument.name, layoutOf(i).globalShape);
      if (!entry.ok())
        return entry.status();
      stacked.push_back(std::move(*entry));
      TRELLIS_RETURN_IF_ERROR(checkStoredTensor(stacked.back(), layoutOf(i), {},
                                                argument.name, path));
      writes.emplace_back(i, &stacked.back().values);
      continue;
    }
    auto it = file->tensors.find(argument.name);
    const std::string prefix = "transformer.";
    if (it == file->tensors.end() && argument.name.rfind(prefix, 0) == 0)
      it = file->tensors.find(argument.name.substr(prefix.size()));
    if (it == file->tensors.end())
      return Status::error(path + ": missing parameter \"" + argument.name +
                           "\"");
    TRELLIS_RETURN_IF_ERROR(checkStoredTensor(
        it->second, layoutOf(i), argument.fileShape, argument.name, path));
    writes.emplace_back(i, &it->second.values);
  }
  for (const auto &[argument, values] : writes)
    TRELLIS_RETURN_IF_ERROR(writeBox(argument, *values));
  return Status::success();
}

} // namespace trellis::runtime
