//===- TrellisModule.cpp - The Python extension over the C API ------------===//
//
// `trellis._trellis`: one Python class per C API handle type (each owns its
// handle and destroys it when collected), every call a C API call, every
// failed status a trellis.Error carrying its message. The Pythonic surface
// (trellis.compile, trellis.Session, trellis.launch) is written in Python on
// top (python/trellis/__init__.py).
//
//===----------------------------------------------------------------------===//

#include "trellis-c/Compiler.h"
#include "trellis-c/Runtime.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace nb = nanobind;

namespace {

/// What trellis.Error is raised from: a failed status's message.
struct TrellisError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Raises trellis.Error with the status's message (and destroys it).
void check(TrellisStatus status) {
  if (!status)
    return;
  std::string message = trellisStatusGetMessage(status);
  trellisStatusDestroy(status);
  throw TrellisError(message);
}

void appendString(const char *data, size_t length, void *userData) {
  static_cast<std::string *>(userData)->append(data, length);
}

template <typename Call> std::string collect(Call call) {
  std::string text;
  check(call(appendString, &text));
  return text;
}

class Model {
public:
  explicit Model(TrellisModel handle) : handle_(handle) {}
  Model(const Model &) = delete;
  ~Model() { trellisModelDestroy(handle_); }

  static Model *fromFile(const std::string &path) {
    TrellisModel handle;
    check(trellisModelCreateFromFile(path.c_str(), &handle));
    return new Model(handle);
  }
  static Model *fromText(const std::string &text, const std::string &format,
                         const std::string &sourceName) {
    TrellisModelFormat kind;
    if (format == "config")
      kind = TRELLIS_MODEL_FORMAT_CONFIG;
    else if (format == "mlir")
      kind = TRELLIS_MODEL_FORMAT_MLIR;
    else
      throw nb::value_error(
          ("format: expected 'config' or 'mlir', found '" + format + "'")
              .c_str());
    TrellisModel handle;
    check(trellisModelCreateFromText(text.data(), text.size(), kind,
                                     sourceName.c_str(), &handle));
    return new Model(handle);
  }
  std::string print(int64_t batch, int64_t seq) const {
    return collect([&](TrellisStringCallback callback, void *data) {
      return trellisModelPrint(handle_, batch, seq, callback, data);
    });
  }
  TrellisModel handle() const { return handle_; }

private:
  TrellisModel handle_;
};

TrellisDType parseDtype(const std::string &name) {
  if (name == "f32" || name == "float32")
    return TRELLIS_DTYPE_F32;
  if (name == "bf16" || name == "bfloat16")
    return TRELLIS_DTYPE_BF16;
  if (name == "f16" || name == "float16")
    return TRELLIS_DTYPE_F16;
  if (name == "i32" || name == "int32")
    return TRELLIS_DTYPE_I32;
  throw nb::value_error(
      ("dtype: expected f32, bf16, f16 or i32, found '" + name + "'").c_str());
}

const char *dtypeName(TrellisDType dtype) {
  switch (dtype) {
  case TRELLIS_DTYPE_F32:
    return "f32";
  case TRELLIS_DTYPE_BF16:
    return "bf16";
  case TRELLIS_DTYPE_F16:
    return "f16";
  case TRELLIS_DTYPE_I32:
    return "i32";
  }
  return "?";
}

class Graph {
public:
  Graph() { check(trellisGraphCreate(&handle_)); }
  Graph(const Graph &) = delete;
  ~Graph() { trellisGraphDestroy(handle_); }

  int64_t parameter(const std::string &name, const std::vector<int64_t> &shape,
                    const std::string &dtype, const std::string &init) {
    int64_t value;
    check(trellisGraphAddParameter(handle_, name.c_str(), shape.data(),
                                   shape.size(), parseDtype(dtype),
                                   init.c_str(), &value));
    return value;
  }
  int64_t state(const std::string &name, const std::vector<int64_t> &shape) {
    int64_t value;
    check(trellisGraphAddState(handle_, name.c_str(), shape.data(),
                               shape.size(), &value));
    return value;
  }
  void setFileShape(int64_t value, const std::vector<int64_t> &shape) {
    check(trellisGraphSetFileShape(handle_, value, shape.data(), shape.size()));
  }
  int64_t input(const std::string &name, const std::vector<int64_t> &shape,
                const std::string &dtype) {
    int64_t value;
    check(trellisGraphAddInput(handle_, name.c_str(), shape.data(),
                               shape.size(), parseDtype(dtype), &value));
    return value;
  }
  void setPart(const std::string &kind, int64_t layer) {
    TrellisPartKind part;
    if (kind == "none")
      part = TRELLIS_PART_NONE;
    else if (kind == "embedding")
      part = TRELLIS_PART_EMBEDDING;
    else if (kind == "layer")
      part = TRELLIS_PART_LAYER;
    else if (kind == "head")
      part = TRELLIS_PART_HEAD;
    else
      throw nb::value_error(("part: expected none, embedding, layer or head, "
                             "found '" +
                             kind + "'")
                                .c_str());
    check(trellisGraphSetPart(handle_, part, layer));
  }
  void setLocation(const std::string &name, std::optional<std::string> file,
                   int64_t line) {
    check(trellisGraphSetLocation(handle_, name.c_str(),
                                  file ? file->c_str() : nullptr, line));
  }
  std::vector<int64_t> op(const std::string &name,
                          const std::vector<int64_t> &operands,
                          const std::string &attributes) {
    std::vector<int64_t> results(8);
    int64_t count = 0;
    check(trellisGraphAddOp(handle_, name.c_str(), operands.data(),
                            operands.size(), attributes.c_str(),
                            results.data(), results.size(), &count));
    results.resize(count);
    return results;
  }
  std::tuple<std::vector<int64_t>, std::string> valueType(int64_t value) {
    std::vector<int64_t> sizes(16);
    int64_t rank = 0;
    TrellisDType dtype;
    check(trellisGraphGetValueType(handle_, value, sizes.data(), sizes.size(),
                                   &rank, &dtype));
    sizes.resize(rank);
    return {sizes, dtypeName(dtype)};
  }
  Model *finish(int64_t loss) {
    TrellisModel model;
    check(trellisGraphFinish(handle_, loss, &model));
    return new Model(model);
  }

private:
  TrellisGraph handle_;
};

class CompileOptions {
public:
  CompileOptions() { check(trellisCompileOptionsCreate(&handle_)); }
  CompileOptions(const CompileOptions &) = delete;
  ~CompileOptions() { trellisCompileOptionsDestroy(handle_); }
  void setInt(const std::string &key, int64_t value) {
    check(trellisCompileOptionsSetInt(handle_, key.c_str(), value));
  }
  void setDouble(const std::string &key, double value) {
    check(trellisCompileOptionsSetDouble(handle_, key.c_str(), value));
  }
  void setString(const std::string &key, const std::string &value) {
    check(trellisCompileOptionsSetString(handle_, key.c_str(), value.c_str()));
  }
  void setBool(const std::string &key, bool value) {
    check(trellisCompileOptionsSetBool(handle_, key.c_str(), value));
  }
  TrellisCompileOptions handle() const { return handle_; }

private:
  TrellisCompileOptions handle_;
};

class Plan {
public:
  explicit Plan(TrellisPlan handle) : handle_(handle) {}
  Plan(const Plan &) = delete;
  ~Plan() { trellisPlanDestroy(handle_); }
  static Plan *fromFile(const std::string &path) {
    TrellisPlan handle;
    check(trellisPlanCreateFromFile(path.c_str(), &handle));
    return new Plan(handle);
  }
  static Plan *fromText(const std::string &text) {
    TrellisPlan handle;
    check(trellisPlanCreateFromText(text.data(), text.size(), &handle));
    return new Plan(handle);
  }
  int64_t numRanks() const {
    int64_t ranks;
    check(trellisPlanGetNumRanks(handle_, &ranks));
    return ranks;
  }
  std::string mesh() const {
    return collect([&](TrellisStringCallback callback, void *data) {
      return trellisPlanGetMesh(handle_, callback, data);
    });
  }
  TrellisPlan handle() const { return handle_; }

private:
  TrellisPlan handle_;
};

class Compilation {
public:
  explicit Compilation(TrellisCompilation handle) : handle_(handle) {}
  Compilation(const Compilation &) = delete;
  ~Compilation() { trellisCompilationDestroy(handle_); }
  std::string text() const {
    return collect([&](TrellisStringCallback callback, void *data) {
      return trellisCompilationGetText(handle_, callback, data);
    });
  }
  void write(const std::string &path) const {
    check(trellisCompilationWrite(handle_, path.c_str()));
  }
  std::string report() const {
    return collect([&](TrellisStringCallback callback, void *data) {
      return trellisCompilationGetReport(handle_, callback, data);
    });
  }
  std::string diagnostics() const {
    return collect([&](TrellisStringCallback callback, void *data) {
      return trellisCompilationGetDiagnostics(handle_, callback, data);
    });
  }
  Plan *plan() const {
    TrellisPlan plan;
    check(trellisCompilationGetPlan(handle_, &plan));
    return new Plan(plan);
  }

private:
  TrellisCompilation handle_;
};

/// The compile options as (key, type, help), type one of "int", "float",
/// "str", "bool".
std::vector<std::tuple<std::string, std::string, std::string>>
optionList(size_t count,
           TrellisStatus (*describe)(size_t, const char **, TrellisOptionType *,
                                     const char **)) {
  static constexpr const char *kTypes[] = {"int", "float", "str", "bool"};
  std::vector<std::tuple<std::string, std::string, std::string>> rows;
  for (size_t i = 0; i < count; ++i) {
    const char *key = nullptr, *help = nullptr;
    TrellisOptionType type = TRELLIS_OPTION_INT;
    check(describe(i, &key, &type, &help));
    rows.emplace_back(key, kTypes[type], help);
  }
  return rows;
}

Compilation *compile(const Model &model, const CompileOptions &options) {
  TrellisCompilation compilation;
  TrellisStatus status;
  {
    nb::gil_scoped_release release;
    status = trellisCompile(model.handle(), options.handle(), &compilation);
  }
  check(status);
  return new Compilation(compilation);
}

/// trellisPlanSearch's JSON text.
std::string planSearch(const Model &model, const CompileOptions &options,
                       const std::string &cluster, int64_t gpus, int64_t top,
                       const std::string &evaluate) {
  std::string text;
  TrellisStatus status;
  {
    nb::gil_scoped_release release;
    status =
        trellisPlanSearch(model.handle(), options.handle(), cluster.c_str(),
                          gpus, top, evaluate.c_str(), appendString, &text);
  }
  check(status);
  return text;
}

class SessionOptions {
public:
  SessionOptions() { check(trellisSessionOptionsCreate(&handle_)); }
  SessionOptions(const SessionOptions &) = delete;
  ~SessionOptions() { trellisSessionOptionsDestroy(handle_); }
  void setInt(const std::string &key, int64_t value) {
    check(trellisSessionOptionsSetInt(handle_, key.c_str(), value));
  }
  void setDouble(const std::string &key, double value) {
    check(trellisSessionOptionsSetDouble(handle_, key.c_str(), value));
  }
  void setString(const std::string &key, const std::string &value) {
    check(trellisSessionOptionsSetString(handle_, key.c_str(), value.c_str()));
  }
  void setBool(const std::string &key, bool value) {
    check(trellisSessionOptionsSetBool(handle_, key.c_str(), value));
  }
  TrellisSessionOptions handle() const { return handle_; }

private:
  TrellisSessionOptions handle_;
};

using TokenArray = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig,
                               nb::device::cpu>;
using ValueArray = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

class Session {
public:
  Session(const Plan &plan, const SessionOptions &options) {
    TrellisStatus status;
    {
      nb::gil_scoped_release release;
      status = trellisSessionCreate(plan.handle(), options.handle(), &handle_);
    }
    check(status);
  }
  Session(const Session &) = delete;
  ~Session() { trellisSessionDestroy(handle_); }

  std::tuple<int64_t, int64_t, int64_t> batchShape() const {
    int64_t batch, seq, vocab;
    check(trellisSessionGetBatchShape(handle_, &batch, &seq, &vocab));
    return {batch, seq, vocab};
  }
  int64_t rank() const {
    int64_t rank;
    check(trellisSessionGetRank(handle_, &rank));
    return rank;
  }
  int64_t completedSteps() const {
    int64_t steps;
    check(trellisSessionGetCompletedSteps(handle_, &steps));
    return steps;
  }
  float step(TokenArray tokens, TokenArray targets) {
    if (tokens.shape(0) != targets.shape(0) ||
        tokens.shape(1) != targets.shape(1))
      throw nb::value_error("step: expected tokens and targets of one shape");
    float loss = 0;
    TrellisStatus status;
    {
      nb::gil_scoped_release release;
      status = trellisSessionStep(handle_, tokens.data(), targets.data(),
                                  static_cast<int64_t>(tokens.size()), &loss);
    }
    check(status);
    return loss;
  }
  float loss() const {
    float loss;
    check(trellisSessionGetLoss(handle_, &loss));
    return loss;
  }
  std::optional<double> learningRate() const {
    double rate = 0;
    int present = 0;
    check(trellisSessionGetLearningRate(handle_, &rate, &present));
    return present ? std::optional<double>(rate) : std::nullopt;
  }
  std::optional<double> gradNorm() const {
    double norm = 0;
    int present = 0;
    check(trellisSessionGetGradNorm(handle_, &norm, &present));
    return present ? std::optional<double>(norm) : std::nullopt;
  }
  /// The last step's expert load, [layers, experts], or an empty array.
  nb::ndarray<nb::numpy, float, nb::ndim<2>> expertLoad() const {
    int64_t layers = 0, experts = 0;
    check(trellisSessionGetExpertLoad(handle_, nullptr, 0, &layers, &experts));
    auto *counts = new float[std::max<int64_t>(1, layers * experts)];
    nb::capsule owner(
        counts, [](void *p) noexcept { delete[] static_cast<float *>(p); });
    check(trellisSessionGetExpertLoad(handle_, counts, layers * experts,
                                      &layers, &experts));
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(
        counts, {static_cast<size_t>(layers), static_cast<size_t>(experts)},
        owner);
  }
  /// The metrics the plan reports, as (name, label, values): values of the
  /// metric's shape (a 0-d array for a scalar), or None before a step and
  /// on ranks that do not hold it.
  std::vector<std::tuple<std::string, std::string, nb::object>>
  metrics() const {
    int64_t count = 0;
    check(trellisSessionGetNumMetrics(handle_, &count));
    std::vector<std::tuple<std::string, std::string, nb::object>> metrics;
    for (int64_t i = 0; i < count; ++i) {
      const char *name = nullptr, *label = nullptr;
      int64_t rank = 0, shape[2] = {1, 1};
      int present = 0;
      check(trellisSessionGetMetric(handle_, i, &name, &label, nullptr, 0,
                                    &rank, shape, &present));
      nb::object values = nb::none();
      if (present) {
        size_t dims[2] = {static_cast<size_t>(shape[0]),
                          static_cast<size_t>(shape[1])};
        int64_t elements = rank == 2 ? shape[0] * shape[1] : 1;
        auto *data = new float[std::max<int64_t>(1, elements)];
        nb::capsule owner(
            data, [](void *p) noexcept { delete[] static_cast<float *>(p); });
        check(trellisSessionGetMetric(handle_, i, &name, &label, data, elements,
                                      &rank, shape, &present));
        values = nb::cast(nb::ndarray<nb::numpy, float>(
            data, static_cast<size_t>(rank), dims, owner));
      }
      metrics.emplace_back(name, label, values);
    }
    return metrics;
  }
  std::vector<std::string> tensorNames() const {
    int64_t count;
    check(trellisSessionGetNumTensors(handle_, &count));
    std::vector<std::string> names;
    for (int64_t i = 0; i < count; ++i)
      names.push_back(collect([&](TrellisStringCallback callback, void *data) {
        return trellisSessionGetTensorName(handle_, i, callback, data);
      }));
    return names;
  }
  std::vector<int64_t> tensorShape(const std::string &name) const {
    std::vector<int64_t> sizes(16);
    int64_t rank = 0;
    check(trellisSessionGetTensorShape(handle_, name.c_str(), sizes.data(),
                                       sizes.size(), &rank));
    sizes.resize(rank);
    return sizes;
  }
  /// The whole tensor as a new float32 NumPy array.
  nb::ndarray<nb::numpy, float> read(const std::string &name) const {
    std::vector<int64_t> shape = tensorShape(name);
    size_t count = 1;
    for (int64_t size : shape)
      count *= static_cast<size_t>(size);
    float *values = new float[count > 0 ? count : 1];
    nb::capsule owner(values,
                      [](void *p) noexcept { delete[] static_cast<float *>(p); });
    TrellisStatus status;
    {
      nb::gil_scoped_release release;
      status = trellisSessionReadTensor(handle_, name.c_str(), values,
                                        static_cast<int64_t>(count));
    }
    check(status);
    std::vector<size_t> dims(shape.begin(), shape.end());
    return nb::ndarray<nb::numpy, float>(values, dims.size(), dims.data(),
                                         owner);
  }
  /// The tensor's own memory as a NumPy array (no copy), which keeps the
  /// session alive.
  nb::ndarray<nb::numpy, float> view(const std::string &name) {
    float *data = nullptr;
    int64_t count = 0;
    check(trellisSessionGetTensorView(handle_, name.c_str(), &data, &count));
    std::vector<int64_t> shape = tensorShape(name);
    std::vector<size_t> dims(shape.begin(), shape.end());
    return nb::ndarray<nb::numpy, float>(data, dims.size(), dims.data(),
                                         nb::find(this));
  }
  void write(const std::string &name, ValueArray values) {
    std::vector<int64_t> shape = tensorShape(name);
    bool same = values.ndim() == shape.size();
    for (size_t i = 0; same && i < shape.size(); ++i)
      same = static_cast<int64_t>(values.shape(i)) == shape[i];
    if (!same) {
      // As Python prints tuples: (64,), (4, 8).
      auto tuple = [](const std::vector<int64_t> &sizes) {
        std::string text;
        for (int64_t size : sizes)
          text += (text.empty() ? "" : ", ") + std::to_string(size);
        return "(" + text + (sizes.size() == 1 ? ",)" : ")");
      };
      std::vector<int64_t> found;
      for (size_t i = 0; i < values.ndim(); ++i)
        found.push_back(static_cast<int64_t>(values.shape(i)));
      throw nb::value_error(("write: tensor \"" + name + "\" has shape " +
                             tuple(shape) + ", found an array of shape " +
                             tuple(found))
                                .c_str());
    }
    check(trellisSessionWriteTensor(handle_, name.c_str(), values.data(),
                                    static_cast<int64_t>(values.size())));
  }
  void save(const std::string &dir) {
    TrellisStatus status;
    {
      nb::gil_scoped_release release;
      status = trellisSessionSave(handle_, dir.c_str());
    }
    check(status);
  }
  void load(const std::string &dir) {
    check(trellisSessionLoad(handle_, dir.c_str()));
  }
  void loadWeights(const std::string &path) {
    check(trellisSessionLoadWeights(handle_, path.c_str()));
  }

private:
  TrellisSession handle_;
};

} // namespace

NB_MODULE(_trellis, m) {
  m.doc() = "Trellis's C API, one class per handle (use the trellis package)";
  nb::exception<TrellisError>(m, "Error", PyExc_RuntimeError);
  m.def("version", &trellisGetVersion, "The library's version.");

  nb::class_<Model>(m, "Model", "A forward pass and loss to compile.")
      .def_static("from_file", &Model::fromFile, nb::arg("path"),
                  "A config.json (GPT-2 or Llama) or a .mlir file.")
      .def_static("from_text", &Model::fromText, nb::arg("text"),
                  nb::arg("format"), nb::arg("source_name") = "<model>",
                  "Config (format 'config') or MLIR (format 'mlir') text.")
      .def("print", &Model::print, nb::arg("batch") = 1, nb::arg("seq") = 1,
           "The model as MLIR (a config imported at batch x seq).");

  nb::class_<Graph>(m, "Graph", "A forward pass built op by op.")
      .def(nb::init<>())
      .def("parameter", &Graph::parameter, nb::arg("name"), nb::arg("shape"),
           nb::arg("dtype"), nb::arg("init"))
      .def("state", &Graph::state, nb::arg("name"), nb::arg("shape"))
      .def("set_file_shape", &Graph::setFileShape, nb::arg("value"),
           nb::arg("shape"))
      .def("input", &Graph::input, nb::arg("name"), nb::arg("shape"),
           nb::arg("dtype"))
      .def("set_part", &Graph::setPart, nb::arg("kind"), nb::arg("layer") = 0)
      .def("set_location", &Graph::setLocation, nb::arg("name"),
           nb::arg("file") = nb::none(), nb::arg("line") = 0)
      .def("op", &Graph::op, nb::arg("name"), nb::arg("operands"),
           nb::arg("attributes") = "")
      .def("value_type", &Graph::valueType, nb::arg("value"))
      .def("finish", &Graph::finish, nb::arg("loss"));

  nb::class_<CompileOptions>(m, "CompileOptions")
      .def(nb::init<>())
      .def("set_int", &CompileOptions::setInt)
      .def("set_double", &CompileOptions::setDouble)
      .def("set_string", &CompileOptions::setString)
      .def("set_bool", &CompileOptions::setBool);

  nb::class_<Plan>(m, "Plan", "A training plan for the runtime.")
      .def_static("from_file", &Plan::fromFile, nb::arg("path"))
      .def_static("from_text", &Plan::fromText, nb::arg("text"))
      .def("num_ranks", &Plan::numRanks)
      .def("mesh", &Plan::mesh);

  nb::class_<Compilation>(m, "Compilation")
      .def("text", &Compilation::text)
      .def("write", &Compilation::write, nb::arg("path"))
      .def("report", &Compilation::report)
      .def("diagnostics", &Compilation::diagnostics)
      .def("plan", &Compilation::plan);

  m.def("compile", &compile, nb::arg("model"), nb::arg("options"));
  m.def("plan_search", &planSearch, nb::arg("model"), nb::arg("options"),
        nb::arg("cluster"), nb::arg("gpus"), nb::arg("top"),
        nb::arg("evaluate"));
  m.def(
      "compile_options",
      [] {
        return optionList(trellisCompileOptionCount(),
                          trellisCompileOptionDescribe);
      },
      "The compile options as (key, type, help).");
  m.def(
      "session_options",
      [] {
        return optionList(trellisSessionOptionCount(),
                          trellisSessionOptionDescribe);
      },
      "The session options as (key, type, help).");

  nb::class_<SessionOptions>(m, "SessionOptions")
      .def(nb::init<>())
      .def("set_int", &SessionOptions::setInt)
      .def("set_double", &SessionOptions::setDouble)
      .def("set_string", &SessionOptions::setString)
      .def("set_bool", &SessionOptions::setBool);

  nb::class_<Session>(m, "Session", "One rank of a running plan.")
      .def(nb::init<const Plan &, const SessionOptions &>(), nb::arg("plan"),
           nb::arg("options"))
      .def("batch_shape", &Session::batchShape)
      .def("rank", &Session::rank)
      .def("completed_steps", &Session::completedSteps)
      .def("step", &Session::step, nb::arg("tokens"), nb::arg("targets"))
      .def("loss", &Session::loss)
      .def("learning_rate", &Session::learningRate)
      .def("grad_norm", &Session::gradNorm)
      .def("expert_load", &Session::expertLoad)
      .def("metrics", &Session::metrics)
      .def("tensor_names", &Session::tensorNames)
      .def("tensor_shape", &Session::tensorShape, nb::arg("name"))
      .def("read", &Session::read, nb::arg("name"))
      .def("view", &Session::view, nb::arg("name"))
      .def("write", &Session::write, nb::arg("name"), nb::arg("values"))
      .def("save", &Session::save, nb::arg("dir"))
      .def("load", &Session::load, nb::arg("dir"))
      .def("load_weights", &Session::loadWeights, nb::arg("path"));
}
