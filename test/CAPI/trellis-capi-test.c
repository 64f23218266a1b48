/*===- trellis-capi-test.c - The C API, exercised from C -----------------===*\
|*                                                                            *|
|* Compiled as C99: every entry point of trellis-c/Compiler.h and             *|
|* trellis-c/Runtime.h is called from here. Each subcommand prints what       *|
|* FileCheck reads (capi.test) and checks numbers itself, exiting 1 with      *|
|* "FAILED:" when one is off.                                                 *|
|*                                                                            *|
|*   builder            a model built op by op equals the same MLIR text      *|
|*   session CONFIG DIR  compile, report, plan files, tensors, checkpoints *|
|*   experts CONFIG      a mixture of experts' load after a step              *|
|*   distributed DIR    dp=2, tp=2, pp=2 sessions equal the one-rank run      *|
|*   errors DIR         every refusal, with its message                       *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#include "trellis-c/Compiler.h"
#include "trellis-c/Runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/*===----------------------------------------------------------------------===*
 * Helpers
 *===----------------------------------------------------------------------===*/

static void fail(const char *what, const char *detail) {
  printf("FAILED: %s: %s\n", what, detail);
  fflush(stdout);
  exit(1);
}

/* A call that must succeed. */
#define CHECK_OK(call)                                                         \
  do {                                                                         \
    TrellisStatus status_ = (call);                                            \
    if (status_)                                                               \
      fail(#call, trellisStatusGetMessage(status_));                          \
  } while (0)

/* A call that must fail: prints "<label>: <message>" for FileCheck. */
static void expectError(const char *label, TrellisStatus status) {
  if (!status)
    fail(label, "expected an error, the call succeeded");
  printf("%s: %s\n", label, trellisStatusGetMessage(status));
  trellisStatusDestroy(status);
}

#define CHECK_TRUE(condition, detail)                                          \
  do {                                                                         \
    if (!(condition))                                                          \
      fail(#condition, detail);                                                \
  } while (0)

typedef struct {
  char *data;
  size_t length;
} Text;

static void appendText(const char *data, size_t length, void *userData) {
  Text *text = (Text *)userData;
  text->data = realloc(text->data, text->length + length + 1);
  memcpy(text->data + text->length, data, length);
  text->length += length;
  text->data[text->length] = '\0';
}

static void clearText(Text *text) {
  free(text->data);
  text->data = NULL;
  text->length = 0;
}

static int close_enough(float a, float b, double relative) {
  return fabs((double)a - (double)b) <= relative * fabs((double)b) + 1e-12;
}

/* Makes `path` an empty directory. */
static void makeFreshDirectory(const char *path) {
  char command[2 * 4096 + 64];
  snprintf(command, sizeof(command), "rm -rf '%s' && mkdir -p '%s'", path,
           path);
  CHECK_TRUE(system(command) == 0, path);
}

/* A deterministic batch of ids below `vocab`: step `step`'s. */
static void fillBatch(int32_t *tokens, int32_t *targets, int64_t count,
                      int64_t vocab, int step) {
  for (int64_t i = 0; i < count; ++i) {
    tokens[i] = (int32_t)((i * 7 + 3 + step * 11) % vocab);
    targets[i] = (int32_t)((i * 5 + 1 + step * 13) % vocab);
  }
}

/* Runs `steps` steps of `session`; the losses go to `losses`. */
static void train(TrellisSession session, int steps, float *losses) {
  int64_t batch = 0, seq = 0, vocab = 0;
  CHECK_OK(trellisSessionGetBatchShape(session, &batch, &seq, &vocab));
  int64_t count = batch * seq;
  int32_t *tokens = malloc(sizeof(int32_t) * count);
  int32_t *targets = malloc(sizeof(int32_t) * count);
  for (int step = 0; step < steps; ++step) {
    fillBatch(tokens, targets, count, vocab, step);
    CHECK_OK(trellisSessionStep(session, tokens, targets, count, &losses[step]));
  }
  free(tokens);
  free(targets);
}

static TrellisSession openSession(TrellisPlan plan, int64_t rank,
                                  const char *rendezvous) {
  TrellisSessionOptions options;
  CHECK_OK(trellisSessionOptionsCreate(&options));
  CHECK_OK(trellisSessionOptionsSetInt(options, "threads", 1));
  CHECK_OK(trellisSessionOptionsSetInt(options, "seed", 0));
  CHECK_OK(trellisSessionOptionsSetDouble(options, "timeout", 20));
  if (rank >= 0)
    CHECK_OK(trellisSessionOptionsSetInt(options, "rank", rank));
  if (rendezvous)
    CHECK_OK(trellisSessionOptionsSetString(options, "rendezvous", rendezvous));
  TrellisSession session;
  CHECK_OK(trellisSessionCreate(plan, options, &session));
  trellisSessionOptionsDestroy(options);
  return session;
}

static TrellisCompilation compileWith(TrellisModel model, const char *mesh,
                                      int64_t microBatches) {
  TrellisCompileOptions options;
  CHECK_OK(trellisCompileOptionsCreate(&options));
  if (mesh)
    CHECK_OK(trellisCompileOptionsSetString(options, "mesh", mesh));
  CHECK_OK(trellisCompileOptionsSetInt(options, "microbatches", microBatches));
  TrellisCompilation compilation;
  CHECK_OK(trellisCompile(model, options, &compilation));
  trellisCompileOptionsDestroy(options);
  return compilation;
}

static TrellisPlan planOf(TrellisCompilation compilation) {
  TrellisPlan plan;
  CHECK_OK(trellisCompilationGetPlan(compilation, &plan));
  return plan;
}

/*===----------------------------------------------------------------------===*
 * builder: the MLP language model of examples/tiny_lm.mlir, op by op
 *===----------------------------------------------------------------------===*/

static int64_t addOp(TrellisGraph graph, const char *name,
                     const int64_t *operands, int64_t count,
                     const char *attributes) {
  int64_t result = -1, results = 0;
  CHECK_OK(trellisGraphAddOp(graph, name, operands, count, attributes, &result,
                             1, &results));
  CHECK_TRUE(results == 1, name);
  return result;
}

static TrellisModel buildTinyLm(void) {
  TrellisGraph graph;
  CHECK_OK(trellisGraphCreate(&graph));
  const int64_t embedShape[] = {64, 32}, upShape[] = {32, 128},
                downShape[] = {128, 32}, normShape[] = {32},
                batchShape[] = {4, 16};
  int64_t embed, up[2], down[2], norm, tokens, targets;
  CHECK_OK(trellisGraphAddParameter(graph, "embed.weight", embedShape, 2,
                                    TRELLIS_DTYPE_F32, "normal:0.02", &embed));
  for (int layer = 0; layer < 2; ++layer) {
    char name[64];
    snprintf(name, sizeof(name), "layers.%d.up.weight", layer);
    CHECK_OK(trellisGraphAddParameter(graph, name, upShape, 2,
                                      TRELLIS_DTYPE_F32, "normal:0.02",
                                      &up[layer]));
    snprintf(name, sizeof(name), "layers.%d.down.weight", layer);
    CHECK_OK(trellisGraphAddParameter(graph, name, downShape, 2,
                                      TRELLIS_DTYPE_F32, "normal:0.02",
                                      &down[layer]));
  }
  CHECK_OK(trellisGraphAddParameter(graph, "norm.weight", normShape, 1,
                                    TRELLIS_DTYPE_F32, "ones", &norm));
  CHECK_OK(trellisGraphAddInput(graph, "tokens", batchShape, 2,
                                TRELLIS_DTYPE_I32, &tokens));
  CHECK_OK(trellisGraphAddInput(graph, "targets", batchShape, 2,
                                TRELLIS_DTYPE_I32, &targets));

  CHECK_OK(trellisGraphSetPart(graph, TRELLIS_PART_EMBEDDING, 0));
  CHECK_OK(trellisGraphSetLocation(graph, "embedding", NULL, 0));
  int64_t operands[2] = {embed, tokens};
  int64_t x = addOp(graph, "graph.embedding", operands, 2, NULL);
  for (int layer = 0; layer < 2; ++layer) {
    CHECK_OK(trellisGraphSetPart(graph, TRELLIS_PART_LAYER, layer));
    CHECK_OK(trellisGraphSetLocation(graph, "layers", "tiny_lm.py", 10 + layer));
    int64_t in[2] = {x, up[layer]};
    int64_t h = addOp(graph, "graph.matmul", in, 2, "");
    int64_t a = addOp(graph, "graph.gelu", &h, 1, NULL);
    int64_t back[2] = {a, down[layer]};
    int64_t d = addOp(graph, "graph.matmul", back, 2, NULL);
    int64_t residual[2] = {x, d};
    x = addOp(graph, "graph.add", residual, 2, NULL);
  }
  CHECK_OK(trellisGraphSetPart(graph, TRELLIS_PART_HEAD, 0));
  int64_t normed[2] = {x, norm};
  int64_t n = addOp(graph, "graph.rms_norm", normed, 2,
                    "{epsilon = 1.0e-5 : f64}");
  int64_t head[2] = {n, embed};
  int64_t logits = addOp(graph, "graph.matmul", head, 2, "{transpose_rhs}");
  int64_t sizes[4], rank = 0;
  TrellisDType dtype;
  CHECK_OK(trellisGraphGetValueType(graph, logits, sizes, 4, &rank, &dtype));
  printf("logits: rank %lld, %lldx%lldx%lld, dtype %d\n", (long long)rank,
         (long long)sizes[0], (long long)sizes[1], (long long)sizes[2],
         (int)dtype);
  int64_t lossInputs[2] = {logits, targets};
  int64_t loss = addOp(graph, "graph.cross_entropy", lossInputs, 2, NULL);
  TrellisModel model;
  CHECK_OK(trellisGraphFinish(graph, loss, &model));
  /* Finishing consumed the graph. */
  expectError("finished graph", trellisGraphSetPart(graph, TRELLIS_PART_NONE, 0));
  trellisGraphDestroy(graph);
  return model;
}

static int runBuilder(const char *examples) {
  printf("trellis %s\n", trellisGetVersion());
  TrellisModel built = buildTinyLm();
  Text text = {0};
  CHECK_OK(trellisModelPrint(built, 0, 0, appendText, &text));
  printf("%s", text.data);
  clearText(&text);

  char path[4096];
  snprintf(path, sizeof(path), "%s/tiny_lm.mlir", examples);
  TrellisModel parsed;
  CHECK_OK(trellisModelCreateFromFile(path, &parsed));

  /* The same model built and parsed: the same plan, the same losses. */
  float builtLosses[3], parsedLosses[3];
  TrellisModel models[2] = {built, parsed};
  float *losses[2] = {builtLosses, parsedLosses};
  for (int i = 0; i < 2; ++i) {
    TrellisCompilation compilation = compileWith(models[i], NULL, 1);
    TrellisPlan plan = planOf(compilation);
    TrellisSession session = openSession(plan, -1, NULL);
    train(session, 3, losses[i]);
    trellisSessionDestroy(session);
    trellisPlanDestroy(plan);
    trellisCompilationDestroy(compilation);
  }
  for (int step = 0; step < 3; ++step) {
    printf("step %d: built %.6f parsed %.6f\n", step + 1, builtLosses[step],
           parsedLosses[step]);
    CHECK_TRUE(close_enough(builtLosses[step], parsedLosses[step], 1e-6),
               "built and parsed models differ");
  }
  CHECK_TRUE(builtLosses[2] < builtLosses[0], "the loss did not go down");

  /* The step as MLIR instead of a plan. */
  TrellisCompileOptions options;
  CHECK_OK(trellisCompileOptionsCreate(&options));
  CHECK_OK(trellisCompileOptionsSetString(options, "emit", "mlir"));
  CHECK_OK(trellisCompileOptionsSetString(options, "optimizer", "sgd"));
  CHECK_OK(trellisCompileOptionsSetDouble(options, "lr", 0.01));
  CHECK_OK(trellisCompileOptionsSetBool(options, "fuse", 0));
  TrellisCompilation mlir;
  CHECK_OK(trellisCompile(built, options, &mlir));
  CHECK_OK(trellisCompilationGetText(mlir, appendText, &text));
  CHECK_TRUE(strstr(text.data, "func.func @train_step") != NULL, text.data);
  CHECK_TRUE(strstr(text.data, "graph.sgd") != NULL, "no sgd update");
  printf("emitted MLIR with @train_step\n");
  clearText(&text);
  TrellisPlan none;
  expectError("plan of MLIR", trellisCompilationGetPlan(mlir, &none));
  trellisCompilationDestroy(mlir);
  trellisCompileOptionsDestroy(options);
  trellisModelDestroy(built);
  trellisModelDestroy(parsed);
  return 0;
}

/*===----------------------------------------------------------------------===*
 * session: a config through compile, plan files, tensors and checkpoints
 *===----------------------------------------------------------------------===*/

static int runSession(const char *config, const char *dir) {
  TrellisModel model;
  CHECK_OK(trellisModelCreateFromFile(config, &model));
  TrellisCompileOptions options;
  CHECK_OK(trellisCompileOptionsCreate(&options));
  CHECK_OK(trellisCompileOptionsSetInt(options, "batch", 4));
  CHECK_OK(trellisCompileOptionsSetInt(options, "seq", 16));
  CHECK_OK(trellisCompileOptionsSetBool(options, "report", 1));
  TrellisCompilation compilation;
  CHECK_OK(trellisCompile(model, options, &compilation));
  Text text = {0};
  CHECK_OK(trellisCompilationGetReport(compilation, appendText, &text));
  CHECK_TRUE(strstr(text.data, "\"per_rank\"") != NULL, text.data);
  const char *parameters = strstr(text.data, "\"model_parameters\": ");
  CHECK_TRUE(parameters != NULL, text.data);
  printf("report: model_parameters %lld\n",
         atoll(parameters + strlen("\"model_parameters\": ")));
  clearText(&text);
  CHECK_OK(trellisCompilationGetDiagnostics(compilation, appendText, &text));
  printf("diagnostics: '%s'\n", text.data ? text.data : "");
  clearText(&text);

  char planPath[4096], checkpoint[4096], weights[4096];
  snprintf(planPath, sizeof(planPath), "%s/gpt2.plan", dir);
  snprintf(checkpoint, sizeof(checkpoint), "%s/checkpoint", dir);
  snprintf(weights, sizeof(weights), "%s/checkpoint/model.safetensors", dir);
  CHECK_OK(trellisCompilationWrite(compilation, planPath));
  TrellisPlan plan;
  CHECK_OK(trellisPlanCreateFromFile(planPath, &plan));
  int64_t ranks = 0;
  CHECK_OK(trellisPlanGetNumRanks(plan, &ranks));
  CHECK_OK(trellisPlanGetMesh(plan, appendText, &text));
  printf("plan: %lld rank, mesh %s\n", (long long)ranks, text.data);
  clearText(&text);
  /* The same plan from memory. */
  CHECK_OK(trellisCompilationGetText(compilation, appendText, &text));
  TrellisPlan fromText;
  CHECK_OK(trellisPlanCreateFromText(text.data, text.length, &fromText));
  clearText(&text);

  TrellisSession session = openSession(plan, -1, NULL);
  int64_t batch, seq, vocab, rank, count, steps;
  CHECK_OK(trellisSessionGetBatchShape(session, &batch, &seq, &vocab));
  CHECK_OK(trellisSessionGetRank(session, &rank));
  CHECK_OK(trellisSessionGetNumTensors(session, &count));
  printf("session: rank %lld, batch %lldx%lld, vocab %lld, %lld tensors\n",
         (long long)rank, (long long)batch, (long long)seq, (long long)vocab,
         (long long)count);
  CHECK_OK(trellisSessionGetTensorName(session, 0, appendText, &text));
  printf("first tensor: %s\n", text.data);
  clearText(&text);
  CHECK_OK(trellisSessionGetTensorName(session, count - 1, appendText, &text));
  printf("last tensor: %s\n", text.data);
  clearText(&text);

  int64_t sizes[4], tensorRank = 0;
  CHECK_OK(trellisSessionGetTensorShape(session, "transformer.wte.weight",
                                        sizes, 4, &tensorRank));
  printf("transformer.wte.weight: %lldx%lld\n", (long long)sizes[0],
         (long long)sizes[1]);
  int64_t elements = sizes[0] * sizes[1];
  float *table = malloc(sizeof(float) * elements);
  float *back = malloc(sizeof(float) * elements);
  CHECK_OK(trellisSessionReadTensor(session, "transformer.wte.weight", table,
                                    elements));
  for (int64_t i = 0; i < elements; ++i)
    table[i] *= 0.5f;
  CHECK_OK(trellisSessionWriteTensor(session, "transformer.wte.weight", table,
                                     elements));
  CHECK_OK(trellisSessionReadTensor(session, "transformer.wte.weight", back,
                                    elements));
  CHECK_TRUE(memcmp(table, back, sizeof(float) * elements) == 0,
             "a written tensor reads back different");

  /* The view: the tensor's own memory, updated in place by each step. */
  float *view = NULL;
  int64_t viewCount = 0;
  CHECK_OK(trellisSessionGetTensorView(session, "transformer.wte.weight",
                                       &view, &viewCount));
  CHECK_TRUE(viewCount == elements &&
                 memcmp(view, back, sizeof(float) * elements) == 0,
             "the view differs from the tensor");
  float losses[4], resumed[2], loss = 0;
  train(session, 2, losses);
  CHECK_OK(trellisSessionReadTensor(session, "transformer.wte.weight", back,
                                    elements));
  CHECK_TRUE(memcmp(view, back, sizeof(float) * elements) == 0 &&
                 memcmp(view, table, sizeof(float) * elements) != 0,
             "the view does not follow the steps");
  printf("view follows the steps\n");
  CHECK_OK(trellisSessionGetLoss(session, &loss));
  CHECK_TRUE(loss == losses[1], "GetLoss differs from the step's loss");
  float moment[64];
  CHECK_OK(trellisSessionReadTensor(session, "adam_m.transformer.ln_f.bias",
                                    moment, 64));
  CHECK_TRUE(moment[0] != 0.0f, "AdamW's first moment is still zero");
  CHECK_OK(trellisSessionSave(session, checkpoint));

  /* Resumed from the checkpoint, a second session takes the same steps as
   * the first. */
  TrellisSession other = openSession(fromText, -1, NULL);
  CHECK_OK(trellisSessionLoad(other, checkpoint));
  CHECK_OK(trellisSessionGetCompletedSteps(other, &steps));
  printf("resumed at step %lld\n", (long long)steps);
  int64_t stepCount = batch * seq;
  int32_t *tokens = malloc(sizeof(int32_t) * stepCount);
  int32_t *targets = malloc(sizeof(int32_t) * stepCount);
  for (int step = 2; step < 4; ++step) {
    fillBatch(tokens, targets, stepCount, vocab, step);
    CHECK_OK(trellisSessionStep(session, tokens, targets, stepCount,
                                &losses[step]));
    CHECK_OK(trellisSessionStep(other, tokens, targets, stepCount,
                                &resumed[step - 2]));
    printf("step %d: %.6f resumed %.6f\n", step + 1, losses[step],
           resumed[step - 2]);
    CHECK_TRUE(losses[step] == resumed[step - 2],
               "the resumed session differs");
  }
  /* Weights from the checkpoint's model file: the parameters of step 2. */
  CHECK_OK(trellisSessionLoadWeights(other, weights));
  CHECK_OK(trellisSessionReadTensor(other, "transformer.wte.weight", back,
                                    elements));
  printf("weights loaded\n");

  free(table);
  free(back);
  free(tokens);
  free(targets);
  trellisSessionDestroy(other);
  trellisSessionDestroy(session);
  trellisPlanDestroy(fromText);
  trellisPlanDestroy(plan);
  trellisCompilationDestroy(compilation);
  trellisCompileOptionsDestroy(options);
  trellisModelDestroy(model);
  return 0;
}

/*===----------------------------------------------------------------------===*
 * distributed: sessions of dp=2, tp=2 and pp=2 equal the one-rank run
 *===----------------------------------------------------------------------===*/

enum { kSteps = 3 };

/* Runs `ranks` sessions of `plan` in child processes (each its own rank,
 * meeting in a fresh directory under `dir`); rank `reporter`'s losses go to
 * `losses`. Children, so that no OpenMP pool is forked. */
static void trainInChildren(TrellisPlan plan, int ranks, const char *dir,
                            const char *name, float *losses) {
  char rendezvous[4096];
  snprintf(rendezvous, sizeof(rendezvous), "%s/%s", dir, name);
  makeFreshDirectory(rendezvous);
  int pipes[8][2];
  pid_t children[8];
  for (int rank = 0; rank < ranks; ++rank) {
    CHECK_TRUE(pipe(pipes[rank]) == 0, "pipe");
    children[rank] = fork();
    CHECK_TRUE(children[rank] >= 0, "fork");
    if (children[rank] == 0) {
      TrellisSession session =
          openSession(plan, ranks > 1 ? rank : -1, ranks > 1 ? rendezvous : NULL);
      float mine[kSteps];
      train(session, kSteps, mine);
      trellisSessionDestroy(session);
      ssize_t written = write(pipes[rank][1], mine, sizeof(mine));
      _exit(written == (ssize_t)sizeof(mine) ? 0 : 1);
    }
    close(pipes[rank][1]);
  }
  for (int rank = 0; rank < ranks; ++rank) {
    float theirs[kSteps];
    ssize_t got = read(pipes[rank][0], theirs, sizeof(theirs));
    close(pipes[rank][0]);
    int status = 0;
    waitpid(children[rank], &status, 0);
    CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                   got == (ssize_t)sizeof(theirs),
               name);
    /* Every rank reports the same loss, the pipeline's first stage too. */
    for (int step = 0; step < kSteps; ++step) {
      if (rank == 0)
        losses[step] = theirs[step];
      CHECK_TRUE(theirs[step] == losses[step], "ranks disagree on the loss");
    }
  }
}

static int runDistributed(const char *config, const char *dir) {
  TrellisModel model;
  CHECK_OK(trellisModelCreateFromFile(config, &model));
  struct {
    const char *mesh;
    int ranks;
    int64_t microBatches;
  } layouts[] = {{NULL, 1, 2}, {"dp=2", 2, 2}, {"tp=2", 2, 2}, {"pp=2", 2, 2}};
  float reference[kSteps];
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); ++i) {
    TrellisCompileOptions options;
    CHECK_OK(trellisCompileOptionsCreate(&options));
    CHECK_OK(trellisCompileOptionsSetInt(options, "batch", 4));
    CHECK_OK(trellisCompileOptionsSetInt(options, "seq", 16));
    CHECK_OK(trellisCompileOptionsSetInt(options, "microbatches",
                                         layouts[i].microBatches));
    if (layouts[i].mesh)
      CHECK_OK(trellisCompileOptionsSetString(options, "mesh", layouts[i].mesh));
    TrellisCompilation compilation;
    CHECK_OK(trellisCompile(model, options, &compilation));
    TrellisPlan plan = planOf(compilation);
    int64_t ranks = 0;
    CHECK_OK(trellisPlanGetNumRanks(plan, &ranks));
    CHECK_TRUE(ranks == layouts[i].ranks, "the plan's mesh");
    float losses[kSteps];
    const char *name = layouts[i].mesh ? layouts[i].mesh : "one-rank";
    trainInChildren(plan, layouts[i].ranks, dir, name, losses);
    for (int step = 0; step < kSteps; ++step) {
      if (i == 0)
        reference[step] = losses[step];
      printf("%s step %d: %.6f\n", name, step + 1, losses[step]);
      CHECK_TRUE(close_enough(losses[step], reference[step], 1e-5),
                 "differs from the one-rank run by more than 1e-5");
    }
    trellisPlanDestroy(plan);
    trellisCompilationDestroy(compilation);
    trellisCompileOptionsDestroy(options);
  }
  trellisModelDestroy(model);
  return 0;
}

/*===----------------------------------------------------------------------===*
 * errors: every refusal says what was expected and what was found
 *===----------------------------------------------------------------------===*/

static void noText(const char *data, size_t length, void *userData) {
  (void)data;
  (void)length;
  (void)userData;
}

static int runErrors(const char *config, const char *dir) {
  /* Status objects. */
  TrellisStatus made = trellisStatusCreateError("made by hand");
  printf("status: %s\n", trellisStatusGetMessage(made));
  trellisStatusDestroy(made);
  made = trellisStatusCreateError("");
  printf("empty status: %s\n", trellisStatusGetMessage(made));
  trellisStatusDestroy(made);
  printf("success: '%s'\n", trellisStatusGetMessage(NULL));
  trellisStatusDestroy(NULL);

  /* Models. */
  TrellisModel model;
  expectError("missing file",
              trellisModelCreateFromFile("/nonexistent/model.mlir", &model));
  expectError("directory", trellisModelCreateFromFile(dir, &model));
  const char *badMlir = "func.func @forward() {\n  %x = graph.nope\n}\n";
  expectError("bad MLIR",
              trellisModelCreateFromText(badMlir, strlen(badMlir),
                                         TRELLIS_MODEL_FORMAT_MLIR, "bad.mlir",
                                         &model));
  const char *badConfig = "{\"model_type\": \"gpt2\", \"n_layer\": 0}";
  expectError("bad config",
              trellisModelCreateFromText(badConfig, strlen(badConfig),
                                         TRELLIS_MODEL_FORMAT_CONFIG,
                                         "bad.json", &model));
  expectError("bad format",
              trellisModelCreateFromText("x", 1, (TrellisModelFormat)7, NULL,
                                         &model));
  expectError("null output", trellisModelCreateFromFile(config, NULL));
  const char *noForward = "func.func @other() { return }\n";
  expectError("no forward",
              trellisModelCreateFromText(noForward, strlen(noForward),
                                         TRELLIS_MODEL_FORMAT_MLIR, "other.mlir",
                                         &model));

  /* Graphs. */
  TrellisGraph graph;
  CHECK_OK(trellisGraphCreate(&graph));
  const int64_t shape[] = {4, 8}, badShape[] = {4, 0}, ids[] = {2, 3};
  int64_t weight, other, tokens, result, results;
  CHECK_OK(trellisGraphAddParameter(graph, "w", shape, 2, TRELLIS_DTYPE_F32,
                                    "normal:0.02", &weight));
  expectError("duplicate name",
              trellisGraphAddParameter(graph, "w", shape, 2, TRELLIS_DTYPE_F32,
                                       "zeros", &other));
  expectError("zero size",
              trellisGraphAddParameter(graph, "z", badShape, 2,
                                       TRELLIS_DTYPE_F32, "zeros", &other));
  expectError("bad init",
              trellisGraphAddParameter(graph, "u", shape, 2, TRELLIS_DTYPE_F32,
                                       "uniform", &other));
  expectError("integer parameter",
              trellisGraphAddParameter(graph, "i", shape, 2, TRELLIS_DTYPE_I32,
                                       "zeros", &other));
  expectError("negative rank",
              trellisGraphAddInput(graph, "r", shape, -1, TRELLIS_DTYPE_I32,
                                   &other));
  expectError("bad dtype",
              trellisGraphAddInput(graph, "x", shape, 2, (TrellisDType)9,
                                   &other));
  CHECK_OK(trellisGraphAddParameter(graph, "v", shape, 2, TRELLIS_DTYPE_BF16,
                                    "zeros", &other));
  CHECK_OK(trellisGraphAddInput(graph, "tokens", ids, 2, TRELLIS_DTYPE_I32,
                                &tokens));
  const int64_t flat[] = {32}, half[] = {16};
  CHECK_OK(trellisGraphSetFileShape(graph, weight, flat, 1));
  expectError("file shape of an input",
              trellisGraphSetFileShape(graph, tokens, flat, 1));
  expectError("file shape of no parameter",
              trellisGraphSetFileShape(graph, 99, flat, 1));
  expectError("file shape without sizes",
              trellisGraphSetFileShape(graph, weight, flat, 0));
  expectError("file shape of other elements",
              trellisGraphSetFileShape(graph, weight, half, 1));
  int64_t pair[2] = {weight, weight}, mixed[2] = {weight, other},
          wrong[2] = {weight, 99};
  expectError("unknown op",
              trellisGraphAddOp(graph, "graph.conv2d", pair, 2, NULL, &result,
                                1, &results));
  expectError("not a graph op",
              trellisGraphAddOp(graph, "func.return", pair, 0, NULL, &result,
                                1, &results));
  expectError("bad operand",
              trellisGraphAddOp(graph, "graph.add", wrong, 2, NULL, &result, 1,
                                &results));
  expectError("bad attributes",
              trellisGraphAddOp(graph, "graph.matmul", pair, 2, "{transpose_rhs",
                                &result, 1, &results));
  expectError("wrong attribute type",
              trellisGraphAddOp(graph, "graph.scale", pair, 1,
                                "{factor = \"two\"}", &result, 1, &results));
  expectError("shapes that do not match",
              trellisGraphAddOp(graph, "graph.matmul", pair, 2, NULL, &result,
                                1, &results));
  expectError("dtypes that do not match",
              trellisGraphAddOp(graph, "graph.add", mixed, 2, NULL, &result, 1,
                                &results));
  expectError("no room for results",
              trellisGraphAddOp(graph, "graph.add", pair, 2, NULL, &result, 0,
                                &results));
  expectError("bad layer", trellisGraphSetPart(graph, TRELLIS_PART_LAYER, -1));
  expectError("bad part", trellisGraphSetPart(graph, (TrellisPartKind)8, 0));
  int64_t sizes[1], rank;
  expectError("no room for sizes",
              trellisGraphGetValueType(graph, weight, sizes, 1, &rank, NULL));
  expectError("bad value",
              trellisGraphGetValueType(graph, 42, sizes, 1, &rank, NULL));
  expectError("bad loss value", trellisGraphFinish(graph, 42, &model));
  expectError("loss not a scalar", trellisGraphFinish(graph, weight, &model));
  trellisGraphDestroy(graph);
  expectError("destroyed graph",
              trellisGraphAddInput(graph, "x", ids, 2, TRELLIS_DTYPE_I32,
                                   &other));
  trellisGraphDestroy(graph); /* again: nothing */

  /* Compile options. */
  CHECK_OK(trellisModelCreateFromFile(config, &model));
  TrellisCompileOptions options;
  CHECK_OK(trellisCompileOptionsCreate(&options));
  expectError("unknown compile option",
              trellisCompileOptionsSetInt(options, "dpp", 2));
  expectError("wrong option type",
              trellisCompileOptionsSetString(options, "dp", "2"));
  expectError("bad emit", trellisCompileOptionsSetString(options, "emit", "x"));
  {
    /* The option table, listed by index. */
    const char *key = NULL, *help = NULL;
    TrellisOptionType type = TRELLIS_OPTION_BOOL;
    CHECK_OK(trellisCompileOptionDescribe(0, &key, &type, &help));
    printf("first compile option: %s (%s): %s\n", key,
           type == TRELLIS_OPTION_INT ? "int" : "not int", help);
    expectError("option index",
                trellisCompileOptionDescribe(trellisCompileOptionCount(), &key,
                                             &type, &help));
  }
  CHECK_OK(trellisCompileOptionsSetDouble(options, "lr", -1));
  TrellisCompilation compilation;
  expectError("bad learning rate", trellisCompile(model, options, &compilation));
  CHECK_OK(trellisCompileOptionsSetDouble(options, "lr", 1e-3));
  CHECK_OK(trellisCompileOptionsSetString(options, "mesh", "dp=2,,tp=2"));
  expectError("bad mesh", trellisCompile(model, options, &compilation));
  CHECK_OK(trellisCompileOptionsSetString(options, "mesh", "tp=3"));
  CHECK_OK(trellisCompileOptionsSetInt(options, "batch", 4));
  CHECK_OK(trellisCompileOptionsSetInt(options, "seq", 16));
  expectError("impossible sharding",
              trellisCompile(model, options, &compilation));
  CHECK_OK(trellisCompileOptionsSetString(options, "mesh", "dp=1"));
  CHECK_OK(trellisCompileOptionsSetInt(options, "seq", 4096));
  expectError("sequence too long", trellisCompile(model, options, &compilation));
  CHECK_OK(trellisCompileOptionsSetInt(options, "seq", 16));
  CHECK_OK(trellisCompile(model, options, &compilation));
  expectError("no report",
              trellisCompilationGetReport(compilation, noText, NULL));
  expectError("unwritable plan",
              trellisCompilationWrite(compilation, "/nonexistent/dir/x.plan"));

  /* Plans. */
  TrellisPlan plan;
  expectError("missing plan",
              trellisPlanCreateFromFile("/nonexistent.plan", &plan));
  expectError("corrupt plan",
              trellisPlanCreateFromText("{\"checksum\":\"crc32:00000000\",}",
                                        30, &plan));
  CHECK_OK(trellisCompilationGetPlan(compilation, &plan));

  /* Session options and sessions. */
  TrellisSessionOptions sessionOptions;
  CHECK_OK(trellisSessionOptionsCreate(&sessionOptions));
  expectError("unknown session option",
              trellisSessionOptionsSetInt(sessionOptions, "ranks", 2));
  expectError("wrong session option type",
              trellisSessionOptionsSetDouble(sessionOptions, "threads", 2));
  expectError("bool session option",
              trellisSessionOptionsSetBool(sessionOptions, "seed", 1));
  {
    /* The session's options, listed by index: the rows of trellis run's
       table that are keys. */
    const char *key = NULL, *help = NULL;
    TrellisOptionType type = TRELLIS_OPTION_BOOL;
    int sawRank = 0;
    for (size_t i = 0; i < trellisSessionOptionCount(); ++i) {
      CHECK_OK(trellisSessionOptionDescribe(i, &key, &type, &help));
      if (strcmp(key, "rank") == 0 && type == TRELLIS_OPTION_INT)
        sawRank = 1;
    }
    printf("session options: %zu, rank an int: %d\n",
           trellisSessionOptionCount(), sawRank);
    expectError("session option index",
                trellisSessionOptionDescribe(trellisSessionOptionCount(), &key,
                                             &type, &help));
  }
  CHECK_OK(trellisSessionOptionsSetInt(sessionOptions, "threads", 0));
  TrellisSession session;
  expectError("bad threads",
              trellisSessionCreate(plan, sessionOptions, &session));
  CHECK_OK(trellisSessionOptionsSetInt(sessionOptions, "threads", 1));
  CHECK_OK(trellisSessionOptionsSetString(sessionOptions, "weights",
                                          "/nonexistent.safetensors"));
  expectError("missing weights",
              trellisSessionCreate(plan, sessionOptions, &session));
  CHECK_OK(trellisSessionOptionsSetString(sessionOptions, "weights", ""));
  CHECK_OK(trellisSessionCreate(plan, sessionOptions, &session));
  int64_t batch, seq, vocab;
  CHECK_OK(trellisSessionGetBatchShape(session, &batch, &seq, &vocab));
  int64_t count = batch * seq;
  int32_t *batchTokens = calloc(count, sizeof(int32_t));
  int32_t *batchTargets = calloc(count, sizeof(int32_t));
  float loss;
  expectError("wrong batch size",
              trellisSessionStep(session, batchTokens, batchTargets, count - 1,
                                 &loss));
  batchTargets[17] = (int32_t)vocab;
  expectError("token outside the vocabulary",
              trellisSessionStep(session, batchTokens, batchTargets, count,
                                 &loss));
  batchTargets[17] = 0;
  expectError("null tokens",
              trellisSessionStep(session, NULL, batchTargets, count, &loss));
  /* Refused batches leave the session usable. */
  CHECK_OK(trellisSessionStep(session, batchTokens, batchTargets, count, &loss));
  float values[4];
  expectError("unknown tensor",
              trellisSessionReadTensor(session, "wte", values, 4));
  expectError("wrong tensor size",
              trellisSessionReadTensor(session, "transformer.wte.weight",
                                       values, 4));
  expectError("wrong write size",
              trellisSessionWriteTensor(session, "transformer.ln_f.bias",
                                        values, 4));
  float *bias = calloc(64, sizeof(float));
  bias[3] = NAN;
  expectError("not finite",
              trellisSessionWriteTensor(session, "transformer.ln_f.bias", bias,
                                        64));
  int64_t shapeSizes[1];
  expectError("no room for the shape",
              trellisSessionGetTensorShape(session, "transformer.wte.weight",
                                           shapeSizes, 1, &rank));
  expectError("bad tensor index",
              trellisSessionGetTensorName(session, 1000, noText, NULL));
  expectError("bad checkpoint", trellisSessionLoad(session, dir));
  expectError("bad weights", trellisSessionLoadWeights(session, config));
  /* Refused checkpoints and weights change nothing. */
  CHECK_OK(trellisSessionStep(session, batchTokens, batchTargets, count, &loss));
  trellisSessionDestroy(session);
  expectError("destroyed session", trellisSessionGetLoss(session, &loss));

  /* A split tensor has no view. */
  CHECK_OK(trellisCompileOptionsSetString(options, "mesh", "tp=2"));
  TrellisCompilation tp;
  CHECK_OK(trellisCompile(model, options, &tp));
  TrellisPlan tpPlan;
  CHECK_OK(trellisCompilationGetPlan(tp, &tpPlan));
  char tpRendezvous[4096];
  snprintf(tpRendezvous, sizeof(tpRendezvous), "%s/tp-view", dir);
  makeFreshDirectory(tpRendezvous);
  int tpDone[2];
  CHECK_TRUE(pipe(tpDone) == 0, "pipe");
  pid_t tpPeer = fork();
  CHECK_TRUE(tpPeer >= 0, "fork");
  if (tpPeer == 0) {
    /* Rank 1 stays until rank 0 is done: leaving closes the connections
     * rank 0 may still be making. */
    close(tpDone[1]);
    TrellisSession mine = openSession(tpPlan, 1, tpRendezvous);
    char byte;
    ssize_t got = read(tpDone[0], &byte, 1);
    (void)got;
    trellisSessionDestroy(mine);
    _exit(0);
  }
  close(tpDone[0]);
  TrellisSession split = openSession(tpPlan, 0, tpRendezvous);
  float *splitView;
  int64_t splitCount;
  expectError("view of a split tensor",
              trellisSessionGetTensorView(split, "transformer.wte.weight",
                                          &splitView, &splitCount));
  CHECK_OK(trellisSessionGetTensorView(split, "transformer.ln_f.bias",
                                       &splitView, &splitCount));
  CHECK_TRUE(splitCount == 64, "a replicated tensor's view");
  close(tpDone[1]);
  trellisSessionDestroy(split);
  waitpid(tpPeer, NULL, 0);
  trellisPlanDestroy(tpPlan);
  trellisCompilationDestroy(tp);

  /* A rank of a 2-rank plan: its options, then its peer's death. */
  CHECK_OK(trellisCompileOptionsSetString(options, "mesh", "dp=2"));
  TrellisCompilation dp;
  CHECK_OK(trellisCompile(model, options, &dp));
  TrellisPlan dpPlan;
  CHECK_OK(trellisCompilationGetPlan(dp, &dpPlan));
  TrellisSessionOptions rankOptions;
  CHECK_OK(trellisSessionOptionsCreate(&rankOptions));
  expectError("no rank", trellisSessionCreate(dpPlan, rankOptions, &session));
  CHECK_OK(trellisSessionOptionsSetInt(rankOptions, "rank", 2));
  expectError("rank outside the mesh",
              trellisSessionCreate(dpPlan, rankOptions, &session));
  CHECK_OK(trellisSessionOptionsSetInt(rankOptions, "rank", 0));
  expectError("no rendezvous",
              trellisSessionCreate(dpPlan, rankOptions, &session));
  char rendezvous[4096];
  snprintf(rendezvous, sizeof(rendezvous), "%s/dead-peer", dir);
  makeFreshDirectory(rendezvous);
  CHECK_OK(trellisSessionOptionsSetString(rankOptions, "rendezvous", rendezvous));
  CHECK_OK(trellisSessionOptionsSetDouble(rankOptions, "timeout", 5));
  int joined[2];
  CHECK_TRUE(pipe(joined) == 0, "pipe");
  pid_t peer = fork();
  CHECK_TRUE(peer >= 0, "fork");
  if (peer == 0) {
    /* Rank 1 joins, waits until rank 0 has joined too, then dies before
     * the first step. */
    close(joined[1]);
    CHECK_OK(trellisSessionOptionsSetInt(rankOptions, "rank", 1));
    TrellisSession mine;
    CHECK_OK(trellisSessionCreate(dpPlan, rankOptions, &mine));
    char byte;
    ssize_t got = read(joined[0], &byte, 1);
    (void)got;
    _exit(0);
  }
  close(joined[0]);
  CHECK_OK(trellisSessionCreate(dpPlan, rankOptions, &session));
  close(joined[1]);
  int status = 0;
  waitpid(peer, &status, 0);
  expectError("peer died",
              trellisSessionStep(session, batchTokens, batchTargets, count,
                                 &loss));
  expectError("session after its job failed",
              trellisSessionReadTensor(session, "transformer.ln_f.bias", bias,
                                       64));
  trellisSessionDestroy(session);

  trellisSessionOptionsDestroy(rankOptions);
  expectError("destroyed options",
              trellisSessionOptionsSetInt(rankOptions, "rank", 0));
  trellisPlanDestroy(dpPlan);
  trellisCompilationDestroy(dp);
  trellisSessionOptionsDestroy(sessionOptions);
  trellisPlanDestroy(plan);
  expectError("destroyed plan", trellisPlanGetNumRanks(plan, &count));
  trellisCompilationDestroy(compilation);
  expectError("destroyed compilation",
              trellisCompilationGetText(compilation, noText, NULL));
  trellisCompileOptionsDestroy(options);
  expectError("destroyed compile options",
              trellisCompileOptionsSetBool(options, "sp", 1));
  trellisModelDestroy(model);
  expectError("destroyed model", trellisCompile(model, options, &compilation));
  free(batchTokens);
  free(batchTargets);
  free(bias);
  return 0;
}

/*===----------------------------------------------------------------------===*
 * experts: a mixture of experts' load after a step
 *===----------------------------------------------------------------------===*/

static int runExperts(const char *config) {
  TrellisModel model;
  CHECK_OK(trellisModelCreateFromFile(config, &model));
  TrellisCompileOptions options;
  CHECK_OK(trellisCompileOptionsCreate(&options));
  CHECK_OK(trellisCompileOptionsSetInt(options, "batch", 4));
  CHECK_OK(trellisCompileOptionsSetInt(options, "seq", 16));
  TrellisCompilation compilation;
  CHECK_OK(trellisCompile(model, options, &compilation));
  trellisCompileOptionsDestroy(options);
  TrellisPlan plan = planOf(compilation);
  TrellisSession session = openSession(plan, -1, NULL);
  int64_t layers = -1, experts = -1;
  CHECK_OK(trellisSessionGetExpertLoad(session, NULL, 0, &layers, &experts));
  printf("before a step: %lld x %lld\n", (long long)layers, (long long)experts);
  float loss;
  train(session, 1, &loss);
  CHECK_OK(trellisSessionGetExpertLoad(session, NULL, 0, &layers, &experts));
  float *counts = malloc(sizeof(float) * layers * experts);
  CHECK_OK(trellisSessionGetExpertLoad(session, counts, layers * experts,
                                       &layers, &experts));
  for (int64_t layer = 0; layer < layers; ++layer) {
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      sum += counts[layer * experts + e];
    printf("layer %lld: %lld experts, %g slots\n", (long long)layer,
           (long long)experts, sum);
  }
  expectError(
      "small capacity",
      trellisSessionGetExpertLoad(session, counts, experts, &layers, &experts));
  {
    /* The same counts through the metrics the plan declares. */
    int64_t metrics = 0, rank = 0, shape[2] = {0, 0};
    int present = 0;
    const char *name = NULL, *label = NULL;
    CHECK_OK(trellisSessionGetNumMetrics(session, &metrics));
    for (int64_t i = 0; i < metrics; ++i) {
      CHECK_OK(trellisSessionGetMetric(session, i, &name, &label, counts,
                                       layers * experts, &rank, shape,
                                       &present));
      printf("metric %s (%s): rank %lld, %lld x %lld, present %d, first %g\n",
             name, label, (long long)rank, (long long)shape[0],
             (long long)shape[1], present, counts[0]);
    }
    expectError("metric index",
                trellisSessionGetMetric(session, metrics, &name, &label, NULL,
                                        0, &rank, shape, &present));
  }
  free(counts);
  trellisSessionDestroy(session);
  trellisPlanDestroy(plan);
  trellisCompilationDestroy(compilation);
  trellisModelDestroy(model);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "builder") == 0)
    return runBuilder(argv[2]);
  if (argc == 4 && strcmp(argv[1], "session") == 0)
    return runSession(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "distributed") == 0)
    return runDistributed(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "errors") == 0)
    return runErrors(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "experts") == 0)
    return runExperts(argv[2]);
  fprintf(stderr, "usage: trellis-capi-test builder EXAMPLES | session CONFIG "
                  "DIR | distributed CONFIG DIR | errors CONFIG DIR | experts "
                  "CONFIG\n");
  return 2;
}
