//===- Runtime.cpp - Plans and training sessions of the C API -------------===//

#include "trellis-c/Runtime.h"

#include "trellis/CAPI/Handles.h"
#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/TrainOptionTable.h"
#include "trellis/Runtime/Trainer.h"

#include <climits>
#include <cstring>

using namespace trellis;
using namespace trellis::capi;
using runtime::Status;
using runtime::StatusOr;

namespace {

/// A session: the trainer of one rank, and why it failed (the ranks may
/// be out of step after a failed collective: nothing runs again).
struct Session {
  std::unique_ptr<runtime::Trainer> trainer;
  std::string failure;
};

HandleTable<runtime::Plan> plans("TrellisPlan");
HandleTable<runtime::TrainOptions> sessionOptions("TrellisSessionOptions");
HandleTable<Session> sessions("TrellisSession");

TrellisStatus toStatus(const Status &status) {
  return status.ok() ? nullptr : errorStatus(status.message());
}

/// The live session of `handle` that has not failed.
TrellisStatus usableSession(TrellisSession handle, Session *&session) {
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  if (!session->failure.empty())
    return errorStatus("this session failed (" + session->failure +
                       "); its ranks may be out of step: destroy it and "
                       "create new sessions on every rank");
  return nullptr;
}

/// Runs a call that may involve the other ranks: a failure fails the
/// session.
TrellisStatus collective(Session &session, const Status &status) {
  if (status.ok())
    return nullptr;
  session.failure = status.message();
  return errorStatus(status.message());
}

/// The session's keys: the rows of trellis run's table given
/// kOptionAsKey (trellis/Runtime/TrainOptionTable.h).
const OptionKeys<runtime::TrainOptions> &sessionOptionKeys() {
  static const OptionKeys<runtime::TrainOptions> keys =
      runtime::trainOptionsIn(kOptionAsKey);
  return keys;
}

TrellisStatus setOption(TrellisSessionOptions handle, const char *key,
                        OptionType type, const OptionValue &value) {
  TRELLIS_CAPI_REQUIRE(key);
  runtime::TrainOptions *options = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessionOptions.lookup(handle.id, options));
  return setKeyedOption(sessionOptionKeys(), "session option", *options, key,
                        type, value);
}

} // namespace

extern "C" {

TrellisStatus trellisPlanCreateFromFile(const char *path, TrellisPlan *plan) {
  TRELLIS_CAPI_REQUIRE(path);
  TRELLIS_CAPI_REQUIRE(plan);
  return guarded(__func__, [&]() -> TrellisStatus {
    StatusOr<runtime::Plan> loaded = runtime::loadPlanFile(path);
    if (!loaded.ok())
      return toStatus(loaded.status());
    plan->id = plans.insert(
        std::make_unique<runtime::Plan>(std::move(*loaded)));
    return nullptr;
  });
}

TrellisStatus trellisPlanCreateFromText(const char *text, size_t length,
                                        TrellisPlan *plan) {
  TRELLIS_CAPI_REQUIRE(text);
  TRELLIS_CAPI_REQUIRE(plan);
  return guarded(__func__, [&]() -> TrellisStatus {
    StatusOr<runtime::Plan> loaded =
        runtime::loadPlanText(std::string(text, length));
    if (!loaded.ok())
      return toStatus(loaded.status().withContext("plan"));
    plan->id = plans.insert(
        std::make_unique<runtime::Plan>(std::move(*loaded)));
    return nullptr;
  });
}

void trellisPlanDestroy(TrellisPlan plan) { plans.erase(plan.id); }

TrellisStatus trellisPlanGetNumRanks(TrellisPlan handle, int64_t *ranks) {
  TRELLIS_CAPI_REQUIRE(ranks);
  runtime::Plan *plan = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(plans.lookup(handle.id, plan));
  *ranks = runtime::planMesh(*plan).size();
  return nullptr;
}

TrellisStatus trellisPlanGetMesh(TrellisPlan handle,
                                 TrellisStringCallback callback,
                                 void *userData) {
  TRELLIS_CAPI_REQUIRE(callback);
  runtime::Plan *plan = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(plans.lookup(handle.id, plan));
  sendString(runtime::planMesh(*plan).toString(), callback, userData);
  return nullptr;
}

size_t trellisSessionOptionCount(void) { return sessionOptionKeys().size(); }

TrellisStatus trellisSessionOptionDescribe(size_t index, const char **key,
                                           TrellisOptionType *type,
                                           const char **help) {
  TRELLIS_CAPI_REQUIRE(key);
  TRELLIS_CAPI_REQUIRE(type);
  TRELLIS_CAPI_REQUIRE(help);
  return describeOption(sessionOptionKeys(), "session option", index, key, type,
                        help);
}

TrellisStatus trellisSessionOptionsCreate(TrellisSessionOptions *options) {
  TRELLIS_CAPI_REQUIRE(options);
  auto created = std::make_unique<runtime::TrainOptions>();
  created->callerBatches = true;
  created->steps = 0;
  // Unset: the session decides from the plan's mesh.
  created->nproc = 0;
  options->id = sessionOptions.insert(std::move(created));
  return nullptr;
}

void trellisSessionOptionsDestroy(TrellisSessionOptions options) {
  sessionOptions.erase(options.id);
}

TrellisStatus trellisSessionOptionsSetInt(TrellisSessionOptions options,
                                          const char *key, int64_t value) {
  OptionValue v;
  v.integer = value;
  return setOption(options, key, OptionType::Int, v);
}

TrellisStatus trellisSessionOptionsSetDouble(TrellisSessionOptions options,
                                             const char *key, double value) {
  OptionValue v;
  v.number = value;
  return setOption(options, key, OptionType::Double, v);
}

TrellisStatus trellisSessionOptionsSetString(TrellisSessionOptions options,
                                             const char *key,
                                             const char *value) {
  TRELLIS_CAPI_REQUIRE(value);
  OptionValue v;
  v.text = value;
  return setOption(options, key, OptionType::String, v);
}

TrellisStatus trellisSessionOptionsSetBool(TrellisSessionOptions options,
                                           const char *key, int value) {
  OptionValue v;
  v.flag = value != 0;
  return setOption(options, key, OptionType::Bool, v);
}

TrellisStatus trellisSessionCreate(TrellisPlan planHandle,
                                   TrellisSessionOptions optionsHandle,
                                   TrellisSession *session) {
  TRELLIS_CAPI_REQUIRE(session);
  runtime::Plan *plan = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(plans.lookup(planHandle.id, plan));
  runtime::TrainOptions *given = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessionOptions.lookup(optionsHandle.id, given));
  return guarded(__func__, [&]() -> TrellisStatus {
    runtime::TrainOptions options = *given;
    int64_t ranks = runtime::planMesh(*plan).size();
    if (options.nproc == 0)
      options.nproc = ranks;
    if (ranks == 1 && options.rank <= 0) {
      // One rank: no communicator.
      options.rank = -1;
      options.nproc = 1;
    } else if (options.rank < 0 || options.rank >= ranks) {
      return errorStatus(
          "session option 'rank': the plan's mesh " +
          runtime::planMesh(*plan).toString() + " has " +
          std::to_string(ranks) + " ranks: expected a rank in [0, " +
          std::to_string(ranks) + ")" +
          (options.rank < 0 ? std::string(", found none")
                            : ", found " + std::to_string(options.rank)));
    } else if (options.rendezvousDir.empty() && options.masterPort == 0) {
      return errorStatus(
          "a plan of " + std::to_string(ranks) +
          " ranks needs a rendezvous: expected session option 'rendezvous' "
          "(a directory every rank shares) or 'master-addr' and "
          "'master-port' (a TCP store)");
    }
    if (options.rank >= 0)
      options.nnodes = 1;
    Status valid = runtime::validateTrainOptions(options);
    if (!valid.ok())
      return errorStatus("session options: " + valid.message());
    StatusOr<std::unique_ptr<runtime::Trainer>> trainer =
        runtime::Trainer::create(options, *plan);
    if (!trainer.ok())
      return toStatus(trainer.status());
    auto created = std::make_unique<Session>();
    created->trainer = std::move(*trainer);
    session->id = sessions.insert(std::move(created));
    return nullptr;
  });
}

void trellisSessionDestroy(TrellisSession session) {
  sessions.erase(session.id);
}

TrellisStatus trellisSessionGetBatchShape(TrellisSession handle,
                                          int64_t *batch, int64_t *seq,
                                          int64_t *vocab) {
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  if (batch)
    *batch = session->trainer->batchSize();
  if (seq)
    *seq = session->trainer->seqLength();
  if (vocab)
    *vocab = session->trainer->vocabSize();
  return nullptr;
}

TrellisStatus trellisSessionGetRank(TrellisSession handle, int64_t *rank) {
  TRELLIS_CAPI_REQUIRE(rank);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  *rank = session->trainer->rank();
  return nullptr;
}

TrellisStatus trellisSessionGetCompletedSteps(TrellisSession handle,
                                              int64_t *steps) {
  TRELLIS_CAPI_REQUIRE(steps);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  *steps = session->trainer->completedSteps();
  return nullptr;
}

TrellisStatus trellisSessionStep(TrellisSession handle, const int32_t *tokens,
                                 const int32_t *targets, int64_t count,
                                 float *loss) {
  TRELLIS_CAPI_REQUIRE(tokens);
  TRELLIS_CAPI_REQUIRE(targets);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  runtime::Trainer &trainer = *session->trainer;
  int64_t expected = trainer.batchSize() * trainer.seqLength();
  if (count != expected)
    return errorStatus("trellisSessionStep: expected the global batch of " +
                       std::to_string(trainer.batchSize()) + " x " +
                       std::to_string(trainer.seqLength()) + " = " +
                       std::to_string(expected) +
                       " token ids in tokens and in targets, found " +
                       std::to_string(count));
  // Checked before the ranks talk: a bad batch leaves the session usable.
  if (Status valid = trainer.checkBatch(tokens, targets); !valid.ok())
    return toStatus(valid);
  return guarded(__func__, [&]() -> TrellisStatus {
    TRELLIS_CAPI_RETURN_IF_ERROR(
        collective(*session, trainer.step(tokens, targets)));
    if (loss)
      *loss = trainer.lastLoss();
    return nullptr;
  });
}

TrellisStatus trellisSessionGetLoss(TrellisSession handle, float *loss) {
  TRELLIS_CAPI_REQUIRE(loss);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  *loss = session->trainer->lastLoss();
  return nullptr;
}

namespace {

/// An optional figure of a session's last step (`figure` of its trainer):
/// the value and 1 in `present`, or 0 in `present`. The callers checked
/// the pointers (their messages name the function).
TrellisStatus getStepFigure(TrellisSession handle, double *value, int *present,
                            std::optional<double> (runtime::Trainer::*figure)()
                                const) {
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  std::optional<double> last = ((*session->trainer).*figure)();
  *present = last.has_value();
  *value = last.value_or(0);
  return nullptr;
}

/// Copies `metric`'s values into `values`, or an error from `function`
/// when `capacity` holds fewer (`what` names them).
TrellisStatus copyMetricValues(const runtime::StepMetric &metric, float *values,
                               int64_t capacity, const char *function,
                               const std::string &what) {
  if (capacity < static_cast<int64_t>(metric.values.size()))
    return errorStatus(std::string(function) + ": capacity " +
                       std::to_string(capacity) + " holds fewer than the " +
                       std::to_string(metric.values.size()) + " " + what);
  std::copy(metric.values.begin(), metric.values.end(), values);
  return nullptr;
}

} // namespace

TrellisStatus trellisSessionGetLearningRate(TrellisSession handle, double *rate,
                                            int *present) {
  TRELLIS_CAPI_REQUIRE(rate);
  TRELLIS_CAPI_REQUIRE(present);
  return getStepFigure(handle, rate, present,
                       &runtime::Trainer::lastLearningRate);
}

TrellisStatus trellisSessionGetGradNorm(TrellisSession handle, double *norm,
                                        int *present) {
  TRELLIS_CAPI_REQUIRE(norm);
  TRELLIS_CAPI_REQUIRE(present);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  const runtime::StepMetric *metric = session->trainer->lastMetric("grad_norm");
  // A crafted plan's grad_norm of another shape is no gradient norm.
  if (metric && metric->values.size() != 1)
    metric = nullptr;
  *present = metric != nullptr;
  *norm = metric ? metric->values.front() : 0;
  return nullptr;
}

TrellisStatus trellisSessionGetExpertLoad(TrellisSession handle, float *counts,
                                          int64_t capacity, int64_t *layers,
                                          int64_t *experts) {
  TRELLIS_CAPI_REQUIRE(layers);
  TRELLIS_CAPI_REQUIRE(experts);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  const runtime::StepMetric *load = session->trainer->lastMetric("expert_load");
  // A crafted plan's expert_load of another shape is no expert load.
  if (load && load->shape.size() != 2)
    load = nullptr;
  *layers = load ? load->shape[0] : 0;
  *experts = load ? load->shape[1] : 0;
  if (counts && load)
    return copyMetricValues(*load, counts, capacity, __func__, "counts");
  return nullptr;
}

TrellisStatus trellisSessionGetNumMetrics(TrellisSession handle,
                                          int64_t *count) {
  TRELLIS_CAPI_REQUIRE(count);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  *count = static_cast<int64_t>(session->trainer->metrics().size());
  return nullptr;
}

TrellisStatus trellisSessionGetMetric(TrellisSession handle, int64_t index,
                                      const char **name, const char **label,
                                      float *values, int64_t capacity,
                                      int64_t *rank, int64_t *shape,
                                      int *present) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(label);
  TRELLIS_CAPI_REQUIRE(rank);
  TRELLIS_CAPI_REQUIRE(shape);
  TRELLIS_CAPI_REQUIRE(present);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  const std::vector<runtime::StepMetric> &metrics = session->trainer->metrics();
  if (index < 0 || index >= static_cast<int64_t>(metrics.size()))
    return errorStatus("trellisSessionGetMetric: metric " +
                       std::to_string(index) + ": expected an index in [0, " +
                       std::to_string(metrics.size()) + ")");
  const runtime::StepMetric &metric = metrics[index];
  *name = metric.name.c_str();
  *label = metric.report.label.c_str();
  *rank = static_cast<int64_t>(metric.shape.size());
  std::copy(metric.shape.begin(), metric.shape.end(), shape);
  *present = metric.present;
  if (values && metric.present)
    return copyMetricValues(metric, values, capacity, __func__,
                            "values of " + metric.name);
  return nullptr;
}

TrellisStatus trellisSessionGetNumTensors(TrellisSession handle,
                                          int64_t *count) {
  TRELLIS_CAPI_REQUIRE(count);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  *count = static_cast<int64_t>(session->trainer->tensorNames().size());
  return nullptr;
}

TrellisStatus trellisSessionGetTensorName(TrellisSession handle, int64_t index,
                                          TrellisStringCallback callback,
                                          void *userData) {
  TRELLIS_CAPI_REQUIRE(callback);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  std::vector<std::string> names = session->trainer->tensorNames();
  if (index < 0 || index >= static_cast<int64_t>(names.size()))
    return errorStatus("trellisSessionGetTensorName: expected an index in "
                       "[0, " +
                       std::to_string(names.size()) + "), found " +
                       std::to_string(index));
  sendString(names[index], callback, userData);
  return nullptr;
}

TrellisStatus trellisSessionGetTensorShape(TrellisSession handle,
                                           const char *name, int64_t *sizes,
                                           int64_t capacity, int64_t *rank) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(rank);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(sessions.lookup(handle.id, session));
  StatusOr<std::vector<int64_t>> shape = session->trainer->tensorShape(name);
  if (!shape.ok())
    return toStatus(shape.status());
  *rank = static_cast<int64_t>(shape->size());
  if (capacity < *rank || (!sizes && *rank > 0))
    return errorStatus("trellisSessionGetTensorShape: tensor \"" +
                       std::string(name) + "\" has rank " +
                       std::to_string(*rank) + ", found room for " +
                       std::to_string(sizes ? capacity : 0) + " sizes");
  std::copy(shape->begin(), shape->end(), sizes);
  return nullptr;
}

TrellisStatus trellisSessionReadTensor(TrellisSession handle, const char *name,
                                       float *values, int64_t count) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(values);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  runtime::Trainer &trainer = *session->trainer;
  StatusOr<std::vector<int64_t>> shape = trainer.tensorShape(name);
  if (!shape.ok())
    return toStatus(shape.status());
  int64_t size = 1;
  for (int64_t extent : *shape)
    size *= extent;
  if (count != size)
    return errorStatus("tensor \"" + std::string(name) + "\" has " +
                       std::to_string(size) + " elements, found room for " +
                       std::to_string(count));
  return guarded(__func__, [&]() -> TrellisStatus {
    std::vector<float> whole;
    TRELLIS_CAPI_RETURN_IF_ERROR(
        collective(*session, trainer.readTensor(name, whole)));
    std::memcpy(values, whole.data(), whole.size() * sizeof(float));
    return nullptr;
  });
}

TrellisStatus trellisSessionGetTensorView(TrellisSession handle,
                                          const char *name, float **data,
                                          int64_t *count) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(data);
  TRELLIS_CAPI_REQUIRE(count);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  StatusOr<float *> view = session->trainer->tensorView(name);
  if (!view.ok())
    return toStatus(view.status());
  StatusOr<std::vector<int64_t>> shape = session->trainer->tensorShape(name);
  int64_t elements = 1;
  for (int64_t size : *shape)
    elements *= size;
  *data = *view;
  *count = elements;
  return nullptr;
}

TrellisStatus trellisSessionWriteTensor(TrellisSession handle,
                                        const char *name, const float *values,
                                        int64_t count) {
  TRELLIS_CAPI_REQUIRE(name);
  TRELLIS_CAPI_REQUIRE(values);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  // Writing talks to no other rank: a refused write leaves it usable.
  return guarded(__func__, [&]() -> TrellisStatus {
    return toStatus(session->trainer->writeTensor(name, values, count));
  });
}

TrellisStatus trellisSessionSave(TrellisSession handle, const char *dir) {
  TRELLIS_CAPI_REQUIRE(dir);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  return guarded(__func__, [&]() -> TrellisStatus {
    // Gathering involves every rank; writing is rank 0's alone, and a
    // failure there (a full disk, a mistyped path) leaves the session
    // usable: the trained state is not lost.
    StatusOr<runtime::Trainer::CheckpointTensors> tensors =
        session->trainer->gatherCheckpoint();
    if (!tensors.ok())
      return collective(*session, tensors.status());
    return toStatus(session->trainer->writeCheckpoint(dir, *tensors));
  });
}

TrellisStatus trellisSessionLoad(TrellisSession handle, const char *dir) {
  TRELLIS_CAPI_REQUIRE(dir);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  // A refused checkpoint changes nothing: the session stays usable.
  return guarded(__func__, [&]() -> TrellisStatus {
    return toStatus(session->trainer->load(dir));
  });
}

TrellisStatus trellisSessionLoadWeights(TrellisSession handle,
                                        const char *path) {
  TRELLIS_CAPI_REQUIRE(path);
  Session *session = nullptr;
  TRELLIS_CAPI_RETURN_IF_ERROR(usableSession(handle, session));
  return guarded(__func__, [&]() -> TrellisStatus {
    return toStatus(session->trainer->loadWeights(path));
  });
}

} // extern "C"
