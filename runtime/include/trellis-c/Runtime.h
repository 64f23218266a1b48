/*===- trellis-c/Runtime.h - Plans and training sessions -----------------===*\
|*                                                                            *|
|* The runtime half of the C API (it links no MLIR): load a training plan,    *|
|* open a session for one rank of its mesh, step it on batches from host      *|
|* memory, read and write parameters and optimizer states by name, save and   *|
|* load checkpoints. See docs/CApi.md and Support.h for the conventions.      *|
|*                                                                            *|
|* A plan of N ranks runs as N sessions, one per process (rank 0..N-1), that  *|
|* find each other through a rendezvous directory or a TCP store. Calls that  *|
|* move data between ranks (step, tensor reads and writes, save, load) must   *|
|* be made by every rank of the session's mesh, in the same order and with    *|
|* the same arguments. A call that fails after the ranks started talking      *|
|* leaves the session failed: every later call on it says why, and the job    *|
|* must make new sessions.                                                    *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef TRELLIS_C_RUNTIME_H
#define TRELLIS_C_RUNTIME_H

#include "trellis-c/Support.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===----------------------------------------------------------------------===*
 * Plans
 *===----------------------------------------------------------------------===*/

/** A training plan, as `trellis compile` writes it. */
typedef struct {
  uint64_t id;
} TrellisPlan;

/** Reads and verifies a plan file (its checksum, its structure). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisPlanCreateFromFile(const char *path,
                                                              TrellisPlan *plan);
/** The same from plan text in memory (`length` bytes at `text`). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisPlanCreateFromText(const char *text,
                                                              size_t length,
                                                              TrellisPlan *plan);
TRELLIS_CAPI_EXPORTED void trellisPlanDestroy(TrellisPlan plan);

/** The number of ranks of the plan's mesh (the sessions it runs as). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisPlanGetNumRanks(TrellisPlan plan,
                                                           int64_t *ranks);
/** The plan's mesh as text, major to minor: "pp=2,dp=2,tp=1". */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisPlanGetMesh(
    TrellisPlan plan, TrellisStringCallback callback, void *userData);

/*===----------------------------------------------------------------------===*
 * Session options
 *===----------------------------------------------------------------------===*/

/** How a session runs; keys are `trellis run`'s flags without the dashes,
 * each of one type, with its defaults: trellisSessionOptionCount and
 * trellisSessionOptionDescribe list them with their help ("rank", this
 * session's rank, required when the mesh has more than one; "threads",
 * "seed", "timeout", "rendezvous", "weights", "load", ...; `trellis run
 * --help` shows the same). "nproc" defaults to the mesh's ranks. A key of
 * another name or type, or a value the option refuses, is an error naming
 * what was expected. */
TRELLIS_CAPI_EXPORTED size_t trellisSessionOptionCount(void);

/** Session option `index` (< trellisSessionOptionCount()): its key, type and
 * help, strings that live as long as the library. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionOptionDescribe(
    size_t index, const char **key, TrellisOptionType *type, const char **help);

typedef struct {
  uint64_t id;
} TrellisSessionOptions;

TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionOptionsCreate(TrellisSessionOptions *options);
TRELLIS_CAPI_EXPORTED void
trellisSessionOptionsDestroy(TrellisSessionOptions options);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionOptionsSetInt(
    TrellisSessionOptions options, const char *key, int64_t value);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionOptionsSetDouble(
    TrellisSessionOptions options, const char *key, double value);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionOptionsSetString(
    TrellisSessionOptions options, const char *key, const char *value);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionOptionsSetBool(
    TrellisSessionOptions options, const char *key, int value);

/*===----------------------------------------------------------------------===*
 * Sessions
 *===----------------------------------------------------------------------===*/

/** One rank of a running plan: its parameters, optimizer states and step. */
typedef struct {
  uint64_t id;
} TrellisSession;

/** Opens rank `options.rank` of `plan`: checks the options, allocates and
 * initializes the state (or takes "weights"/"load"), and connects to the
 * other ranks (every rank must create its session, and none may destroy it
 * before all have been created: connecting takes them all). The plan and
 * options may be destroyed afterwards. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionCreate(
    TrellisPlan plan, TrellisSessionOptions options, TrellisSession *session);
TRELLIS_CAPI_EXPORTED void trellisSessionDestroy(TrellisSession session);

/** The global batch one step takes: `batch` rows of `seq` tokens, ids below
 * `vocab`. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetBatchShape(
    TrellisSession session, int64_t *batch, int64_t *seq, int64_t *vocab);
/** This session's rank (0 for a plan of one). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetRank(TrellisSession session,
                                                          int64_t *rank);
/** Steps completed (those of a loaded checkpoint included). */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionGetCompletedSteps(TrellisSession session, int64_t *steps);

/** One training step on the global batch: `count` (= batch * seq) token ids
 * in `tokens` and as many in `targets`, row-major; every rank passes the
 * same batch and takes its piece. The step's loss (the same on every rank)
 * goes to `loss` when it is not NULL. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionStep(TrellisSession session,
                                                       const int32_t *tokens,
                                                       const int32_t *targets,
                                                       int64_t count,
                                                       float *loss);
/** The last step's loss (0 before the first). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetLoss(TrellisSession session,
                                                          float *loss);
/** The learning rate the last step's update used: `*present` is 1 and the
 * rate is in `rate` for a plan with a schedule after its first step, else
 * `*present` is 0. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetLearningRate(
    TrellisSession session, double *rate, int *present);
/** The last step's global gradient norm before clipping (the scalar metric
 * "grad_norm"): `*present` is 1 and the norm (NaN for a step an fp16
 * overflow skipped) is in `norm` for a plan compiled with --clip-grad after
 * its first step, on the ranks that hold it (every rank, or pipeline stage
 * 0), else `*present` is 0. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionGetGradNorm(TrellisSession session, double *norm, int *present);
/** How many slots of the last step chose each expert (the [layers,
 * experts] metric "expert_load"), for a plan with mixture-of-experts
 * layers, on the ranks that hold it (every rank, or the
 * last pipeline stage): `*layers` x `*experts` counts, row-major, into
 * `counts` when `capacity` holds them (`counts` may be null to ask the
 * sizes). Both sizes are 0 when the plan has no such layers or before the
 * first step. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetExpertLoad(
    TrellisSession session, float *counts, int64_t capacity, int64_t *layers,
    int64_t *experts);
/** The figures of the step the session's plan reports, each declared by
 * the compiler pass that makes it ("grad_norm", "expert_load", ...). */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionGetNumMetrics(TrellisSession session, int64_t *count);
/** Metric `index` (< the count): its name and its step line's label
 * (strings valid while the session lives), its rank (0: a scalar; 2:
 * rows of columns) and shape (`shape` holds 2), and whether a step has
 * made it on this rank (`*present`; every rank, or the pipeline stages
 * that make it). When `values` is not NULL and it is present, its last
 * values, row-major, into `values` (`capacity` at least their count). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetMetric(
    TrellisSession session, int64_t index, const char **name,
    const char **label, float *values, int64_t capacity, int64_t *rank,
    int64_t *shape, int *present);

/** The named tensors: parameters by their names, then optimizer states as
 * "adam_m.NAME", "adam_v.NAME" and fp32 master weights as "master.NAME"
 * (the names of a checkpoint's tensors), in plan order. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionGetNumTensors(TrellisSession session, int64_t *count);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetTensorName(
    TrellisSession session, int64_t index, TrellisStringCallback callback,
    void *userData);
/** The whole (unsplit) shape of a tensor: its rank goes to `rank`, its
 * sizes to `sizes[0..rank)` when `capacity` >= rank (else the call fails,
 * saying the rank). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionGetTensorShape(
    TrellisSession session, const char *name, int64_t *sizes, int64_t capacity,
    int64_t *rank);
/** Copies the whole tensor `name` as fp32 into `values` (`count` elements:
 * its size). Every rank must call it. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionReadTensor(
    TrellisSession session, const char *name, float *values, int64_t count);
/** The memory of tensor `name` itself (`*count` fp32 values at `*data`),
 * when this rank holds it whole, as fp32, in host memory: valid until the
 * session is destroyed, updated in place by each step; writes through it
 * change this rank's copy only (between steps). Otherwise the call fails
 * saying why (split over ranks, held in bf16, device memory): read it. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionGetTensorView(TrellisSession session, const char *name,
                            float **data, int64_t *count);
/** Sets the whole tensor `name` from `count` fp32 values (each rank keeps
 * its piece; a bf16 or fp16 tensor is rounded). Every rank must call it with
 * the same values. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionWriteTensor(
    TrellisSession session, const char *name, const float *values,
    int64_t count);

/** Writes the checkpoint directory `dir` (model.safetensors with Hugging
 * Face names, optimizer.safetensors, a manifest), committed as a whole.
 * Every rank gathers; rank 0 writes, and a failure to write (a mistyped
 * path, a full disk) leaves the session usable. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionSave(TrellisSession session,
                                                       const char *dir);
/** Restores a checkpoint `trellisSessionSave` (or `trellis run --save`)
 * wrote for the same model, in any layout. A refused checkpoint changes
 * nothing. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisSessionLoad(TrellisSession session,
                                                       const char *dir);
/** Takes the parameters from a Hugging Face .safetensors file (refused
 * weights change nothing). */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisSessionLoadWeights(TrellisSession session, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* TRELLIS_C_RUNTIME_H */
