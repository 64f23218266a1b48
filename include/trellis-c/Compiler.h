/*===- trellis-c/Compiler.h - Models, graph building and compiling -------===*\
|*                                                                            *|
|* The compiler half of the C API: a model from a Hugging Face config.json,   *|
|* from MLIR text of graph ops, or built op by op; compiled with the options  *|
|* of `trellis compile` into a plan (in memory or a file) with its report and *|
|* diagnostics. Plans run through trellis-c/Runtime.h. See docs/CApi.md and   *|
|* trellis-c/Support.h for the conventions.                                   *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef TRELLIS_C_COMPILER_H
#define TRELLIS_C_COMPILER_H

#include "trellis-c/Runtime.h"
#include "trellis-c/Support.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===----------------------------------------------------------------------===*
 * Models
 *===----------------------------------------------------------------------===*/

/** A forward pass and its loss: a function @forward whose arguments are
 * parameters and inputs (tokens and targets), returning the scalar loss. */
typedef struct {
  uint64_t id;
} TrellisModel;

typedef enum {
  /** A Hugging Face config.json (GPT-2 or Llama), imported when compiled, at
   * the "batch" and "seq" compile options. */
  TRELLIS_MODEL_FORMAT_CONFIG = 0,
  /** MLIR text of graph ops (a func.func @forward), fixed shapes. */
  TRELLIS_MODEL_FORMAT_MLIR = 1,
} TrellisModelFormat;

/** Reads a model file: MLIR when its name ends in ".mlir", else a config.
 * Errors say what is wrong and where (MLIR diagnostics with their line). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisModelCreateFromFile(const char *path,
                                                               TrellisModel *model);
/** The same from text in memory; `sourceName` names it in messages. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisModelCreateFromText(const char *text, size_t length,
                           TrellisModelFormat format, const char *sourceName,
                           TrellisModel *model);
TRELLIS_CAPI_EXPORTED void trellisModelDestroy(TrellisModel model);
/** The model as MLIR text (a config: imported at `batch` x `seq`). */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisModelPrint(TrellisModel model, int64_t batch, int64_t seq,
                  TrellisStringCallback callback, void *userData);

/*===----------------------------------------------------------------------===*
 * Building a model op by op
 *===----------------------------------------------------------------------===*/

/** A forward pass under construction. Values are numbered in creation
 * order from 0; every op's result types are inferred (and checked) as the
 * op is added, so an error names the op that cannot work. */
typedef struct {
  uint64_t id;
} TrellisGraph;

typedef enum {
  TRELLIS_DTYPE_F32 = 0,
  TRELLIS_DTYPE_BF16 = 1,
  TRELLIS_DTYPE_F16 = 2,
  TRELLIS_DTYPE_I32 = 3,
} TrellisDType;

typedef enum {
  /** No part: a model without parts cannot be pipelined. */
  TRELLIS_PART_NONE = 0,
  TRELLIS_PART_EMBEDDING = 1,
  /** Layer `layer` (0, 1, ...). */
  TRELLIS_PART_LAYER = 2,
  /** The head: final norm, logits and loss. */
  TRELLIS_PART_HEAD = 3,
} TrellisPartKind;

TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphCreate(TrellisGraph *graph);
TRELLIS_CAPI_EXPORTED void trellisGraphDestroy(TrellisGraph graph);

/** A parameter of `rank` sizes and `dtype`, named `name` (its checkpoint
 * and Hugging Face name: presets match it), initialized by `init`: "zeros",
 * "ones" or "normal:STD". Its value number goes to `value`. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphAddParameter(
    TrellisGraph graph, const char *name, const int64_t *sizes, int64_t rank,
    TrellisDType dtype, const char *init, int64_t *value);
/** A state argument of `rank` sizes (f32), named `name`: read by the step,
 * loaded from and saved with the weights, never trained (DeepSeek-V3's
 * router score correction bias). Its value number goes to `value`. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphAddState(TrellisGraph graph,
                                                         const char *name,
                                                         const int64_t *sizes,
                                                         int64_t rank,
                                                         int64_t *value);
/** The shape checkpoints and weight files store parameter `value` under:
 * the same elements in row-major order (a fused [in, 3, out] weight that
 * Hugging Face stores as [in, 3 * out]). */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisGraphSetFileShape(TrellisGraph graph, int64_t value,
                         const int64_t *sizes, int64_t rank);
/** An input: "tokens" and "targets" ([batch, seq] i32) are what sessions
 * feed. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisGraphAddInput(TrellisGraph graph, const char *name, const int64_t *sizes,
                     int64_t rank, TrellisDType dtype, int64_t *value);

/** The model part of the ops added from now on. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphSetPart(TrellisGraph graph,
                                                        TrellisPartKind kind,
                                                        int64_t layer);
/** The location of the ops added from now on, for messages: `name` (a
 * module path such as "transformer.h.0.attn"), and `file`:`line` where
 * `file` is not NULL. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphSetLocation(TrellisGraph graph,
                                                            const char *name,
                                                            const char *file,
                                                            int64_t line);

/** Adds the graph op `opName` ("graph.matmul": the ops of
 * include/trellis/Dialect/Graph/IR/GraphOps.td) on `operands`
 * (value numbers) with `attributes`, an MLIR attribute dictionary such as
 * "{transpose_rhs = true}" (NULL or "" for none). Its results' numbers go
 * to `results[0..*numResults)`, `capacity` being room for them. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphAddOp(
    TrellisGraph graph, const char *opName, const int64_t *operands,
    int64_t numOperands, const char *attributes, int64_t *results,
    int64_t capacity, int64_t *numResults);

/** The type of a value: its rank, its sizes in `sizes[0..rank)` (room for
 * `capacity`), its element type. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphGetValueType(
    TrellisGraph graph, int64_t value, int64_t *sizes, int64_t capacity,
    int64_t *rank, TrellisDType *dtype);

/** Ends the graph: `loss` (a scalar f32 value) is @forward's result. The
 * model is verified; on success the graph handle is consumed (destroyed)
 * and the model goes to `model`. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisGraphFinish(TrellisGraph graph,
                                                       int64_t loss,
                                                       TrellisModel *model);

/*===----------------------------------------------------------------------===*
 * Compiling
 *===----------------------------------------------------------------------===*/

/** The options of `trellis compile`, keyed by its flags without the dashes
 * (and with the same defaults), each of one type: trellisCompileOptionCount
 * and trellisCompileOptionDescribe list them with their help ("mesh",
 * "batch", "zero", "lr", ...; `trellis compile --help` shows the same). An
 * unknown key or a value of another type is an error naming what was
 * expected. For a model of fixed shapes (MLIR, built), "batch" defaults to
 * its tokens' rows times "microbatches". */
/** The number of compile options. */
TRELLIS_CAPI_EXPORTED size_t trellisCompileOptionCount(void);

/** Compile option `index` (< trellisCompileOptionCount()): its key, type
 * and help, strings that live as long as the library. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisCompileOptionDescribe(size_t index, const char **key,
                             TrellisOptionType *type, const char **help);

typedef struct {
  uint64_t id;
} TrellisCompileOptions;

TRELLIS_CAPI_EXPORTED TrellisStatus
trellisCompileOptionsCreate(TrellisCompileOptions *options);
TRELLIS_CAPI_EXPORTED void
trellisCompileOptionsDestroy(TrellisCompileOptions options);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompileOptionsSetInt(
    TrellisCompileOptions options, const char *key, int64_t value);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompileOptionsSetDouble(
    TrellisCompileOptions options, const char *key, double value);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompileOptionsSetString(
    TrellisCompileOptions options, const char *key, const char *value);
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompileOptionsSetBool(
    TrellisCompileOptions options, const char *key, int value);

/** A compiled model: the plan (or the step as MLIR), its report, and the
 * warnings and remarks compiling gave. */
typedef struct {
  uint64_t id;
} TrellisCompilation;

/** Compiles `model` (left as it was: it can be compiled again) with
 * `options`. On failure the status holds every error, located as the
 * driver prints them. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompile(TrellisModel model,
                                                   TrellisCompileOptions options,
                                                   TrellisCompilation *compilation);
TRELLIS_CAPI_EXPORTED void trellisCompilationDestroy(TrellisCompilation compilation);

/** The plan text (or the MLIR of "emit" "mlir"). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompilationGetText(
    TrellisCompilation compilation, TrellisStringCallback callback,
    void *userData);
/** Writes the text to the file `path`. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisCompilationWrite(TrellisCompilation compilation, const char *path);
/** The report as docs/Report.md's JSON (needs the "report" option). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompilationGetReport(
    TrellisCompilation compilation, TrellisStringCallback callback,
    void *userData);
/** The warnings and remarks, one per line ("" when none). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisCompilationGetDiagnostics(
    TrellisCompilation compilation, TrellisStringCallback callback,
    void *userData);
/** The plan, ready for trellisSessionCreate. */
TRELLIS_CAPI_EXPORTED TrellisStatus
trellisCompilationGetPlan(TrellisCompilation compilation, TrellisPlan *plan);

/** Searches the plans of `model` as `trellis plan` does (docs/Planner.md):
 * for `gpus` devices of `cluster` (a preset or a cluster file), the global
 * batch, sequence and precision of `options` ("batch", "seq",
 * "precision"), showing `top` plans; `evaluate` ("" or null: none) fixes
 * what `trellis plan --evaluate` fixes. The result is `trellis plan
 * --json`'s text: the plans best first, each with its "compile_options"
 * (keys of trellisCompileOptionsSet*), and "closest" when none fits. */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisPlanSearch(
    TrellisModel model, TrellisCompileOptions options, const char *cluster,
    int64_t gpus, int64_t top, const char *evaluate,
    TrellisStringCallback callback, void *userData);

#ifdef __cplusplus
}
#endif

#endif /* TRELLIS_C_COMPILER_H */
