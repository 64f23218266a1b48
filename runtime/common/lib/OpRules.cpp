//===- OpRules.cpp - The plan ops' contracts: operands, attributes, rules -===//
//
// The table itself: one entry per plan op (graph ops, accumulate, casts,
// collectives and transfers). Shape rules return what was expected and
// what was found; the compiler's diagnostics and the plan loader's errors
// are these texts.
//
//===----------------------------------------------------------------------===//

#include "OpRules.h"

#include "trellis/Common/FusedProgram.h"

#include <algorithm>
#include <cstdio>

namespace trellis {

namespace {

using Shape = std::vector<int64_t>;
using Results = std::vector<TensorType>;

/// Returns the diagnostic of `expr` if it has one.
#define TRELLIS_CHECK(expr)                                                    \
  do {                                                                         \
    if (Diagnostic diagnostic = (expr))                                        \
      return diagnostic;                                                       \
  } while (false)

std::string text(int64_t value) { return std::to_string(value); }

Diagnostic expectRank(const OpInstance &op, size_t i, const std::string &name,
                      size_t rank) {
  if (op.shape(i).size() == rank)
    return std::nullopt;
  return "expected " + name + " of rank " + text(rank) + ", found shape " +
         formatShape(op.shape(i));
}

Diagnostic expectSameShape(const OpInstance &op, size_t i,
                           const std::string &name, size_t reference,
                           const std::string &referenceName) {
  if (op.shape(i) == op.shape(reference))
    return std::nullopt;
  return "expected " + name + " to have the shape of " + referenceName + " " +
         formatShape(op.shape(reference)) + ", found " +
         formatShape(op.shape(i));
}

/// `name` is 1-D of the input's last dimension.
Diagnostic expectFeatureVector(const OpInstance &op, size_t i,
                               const std::string &name) {
  int64_t features = op.shape(0).back();
  if (op.shape(i) == Shape{features})
    return std::nullopt;
  return "expected " + name + " of shape [" + text(features) +
         "] (the last dimension of the input), found " +
         formatShape(op.shape(i));
}

Diagnostic expectPositive(const OpInstance &op, const std::string &name) {
  double value = op.real(name);
  if (value > 0)
    return std::nullopt;
  char found[32];
  std::snprintf(found, sizeof(found), "%g", value);
  return "expected " + name + " > 0, found " + found;
}

TensorType f32(Shape shape) { return {std::move(shape), ElementType::F32}; }

/// The input's type with another shape.
TensorType like(const OpInstance &op, size_t i, Shape shape) {
  return {std::move(shape), op.input(i).element};
}

Diagnostic binaryRule(const OpInstance &op, Results &results) {
  std::optional<Shape> shape = broadcastShapes(op.shape(0), op.shape(1));
  if (!shape)
    return "operands of shapes " + formatShape(op.shape(0)) + " and " +
           formatShape(op.shape(1)) + " do not broadcast";
  results.push_back(like(op, 0, *shape));
  return std::nullopt;
}

Diagnostic sameAsInputRule(const OpInstance &op, Results &results) {
  results.push_back(op.input(0));
  return std::nullopt;
}

Diagnostic reduceRule(const OpInstance &op, Results &results) {
  const Shape &shape = op.shape(0);
  int64_t rank = shape.size();
  Shape dims = op.ints("dims");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= rank)
      return "expected reduced dimensions in [0, " + text(rank) +
             "), found " + text(dims[i]);
    if (i > 0 && dims[i - 1] >= dims[i])
      return "expected strictly increasing dimensions, found " +
             formatShape(dims);
  }
  bool keep = op.flag("keep_dims");
  Shape result;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      result.push_back(shape[d]);
    else if (keep)
      result.push_back(1);
  }
  results.push_back(like(op, 0, result));
  return std::nullopt;
}

Diagnostic normRule(const OpInstance &op, Results &results, bool hasBias,
                    bool isGrad) {
  if (op.shape(0).empty())
    return "expected an input of rank >= 1, found []";
  TRELLIS_CHECK(expectPositive(op, "epsilon"));
  TRELLIS_CHECK(expectFeatureVector(op, 1, "weight"));
  if (isGrad) {
    TRELLIS_CHECK(expectSameShape(op, 2, "result_grad", 0, "input"));
    results.push_back(op.input(0));
    results.push_back(op.input(1));
    if (hasBias)
      results.push_back(op.input(1));
    return std::nullopt;
  }
  if (hasBias)
    TRELLIS_CHECK(expectFeatureVector(op, 2, "bias"));
  results.push_back(op.input(0));
  return std::nullopt;
}

/// Queries [batch, seq, heads, dim], keys [batch, seq, kv_heads, dim] and
/// values shaped like the keys.
Diagnostic attentionRanks(const OpInstance &op) {
  TRELLIS_CHECK(expectRank(op, 0, "query [batch, seq, heads, dim]", 4));
  TRELLIS_CHECK(expectRank(op, 1, "key [batch, seq, kv_heads, dim]", 4));
  return expectSameShape(op, 2, "value", 1, "key");
}

Diagnostic expectKvHeadsDividing(const Shape &q, const Shape &k) {
  if (k[2] == 0 || q[2] % k[2] != 0)
    return "expected kv heads (" + text(k[2]) + ") to divide query heads (" +
           text(q[2]) + ")";
  return std::nullopt;
}

Diagnostic attentionOperands(const OpInstance &op) {
  TRELLIS_CHECK(attentionRanks(op));
  const Shape &q = op.shape(0), &k = op.shape(1);
  // Queries split over mesh axes (context parallelism) are a piece of the
  // keys' sequence: one of the group's when it is known (the plan), some
  // whole fraction of it otherwise (the compiler's local types).
  bool split = op.has("axes");
  int64_t pieces = op.numAxes() ? op.groupSize() : 1;
  bool sequences = split && !op.numAxes()
                       ? q[1] > 0 && k[1] % q[1] == 0
                       : q[1] * pieces == k[1];
  if (q[0] != k[0] || !sequences || q[3] != k[3])
    return "expected key of shape [" + text(q[0]) + ", " +
           text(q[1] * pieces) + ", kv_heads, " + text(q[3]) +
           "] to match query " + formatShape(q) +
           (pieces > 1 ? " (a piece of " + text(pieces) + ")" : "") +
           ", found " + formatShape(k);
  return expectKvHeadsDividing(q, k);
}

/// Ring attention's blocks: queries [B, S, Hq, D] and keys and values
/// [B, S, Hkv, D] of one equal block of the sequence.
Diagnostic attentionBlockOperands(const OpInstance &op) {
  TRELLIS_CHECK(attentionRanks(op));
  const Shape &q = op.shape(0), &k = op.shape(1);
  if (q[0] != k[0] || q[1] != k[1] || q[3] != k[3])
    return "expected a key block of shape [" + text(q[0]) + ", " +
           text(q[1]) + ", kv_heads, " + text(q[3]) +
           "] (the queries' block length), found " + formatShape(k);
  return expectKvHeadsDividing(q, k);
}

/// The log-sum-exp of attention rows, [batch, heads, seq] in f32, for the
/// queries (operand 0).
TensorType logSumExpType(const OpInstance &op) {
  const Shape &q = op.shape(0);
  return f32({q[0], q[2], q[1]});
}

Diagnostic expectLogSumExp(const OpInstance &op, size_t i,
                           const std::string &name) {
  TensorType expected = logSumExpType(op);
  if (op.shape(i) == expected.shape)
    return std::nullopt;
  return "expected " + name + " of shape " + formatShape(expected.shape) +
         " ([batch, heads, seq] of the result), found " +
         formatShape(op.shape(i));
}

Diagnostic targetsOperand(const OpInstance &op) {
  const Shape &logits = op.shape(0), &targets = op.shape(1);
  Shape expected = logits.empty() ? logits : Shape(logits.begin(),
                                                   logits.end() - 1);
  if (logits.empty() || expected != targets)
    return "expected targets of shape " + formatShape(expected) + " (logits " +
           formatShape(logits) + " without the class dimension), found " +
           formatShape(targets);
  if (op.integer("normalizer") < 0)
    return "expected normalizer >= 0, found " + text(op.integer("normalizer"));
  return std::nullopt;
}

Diagnostic checkDim(const OpInstance &op, const std::string &name) {
  int64_t dim = op.integer(name);
  int64_t rank = op.shape(0).size();
  if (dim < 0 || dim >= rank)
    return "expected " + name + " in [0, " + text(rank) + "), found " +
           text(dim);
  return std::nullopt;
}

Diagnostic checkDivisible(const OpInstance &op, int64_t dim) {
  int64_t size = op.shape(0)[dim];
  if (size % op.groupSize() != 0)
    return "dimension " + text(dim) + " of size " + text(size) +
           " is not divisible by the group size " + text(op.groupSize());
  return std::nullopt;
}

Diagnostic checkPosition(const OpInstance &op, const std::string &name) {
  int64_t position = op.integer(name);
  if (position < 0 || position >= op.groupSize())
    return name + " " + text(position) + " is not a position in a group of " +
           text(op.groupSize());
  return std::nullopt;
}

Diagnostic checkReduceKind(const OpInstance &op) {
  std::string kind = op.text("kind");
  if (kind != "sum" && kind != "max" && kind != "min")
    return "expected kind sum, max or min, found '" + kind + "'";
  return std::nullopt;
}

using Rule = std::function<Diagnostic(const OpInstance &, Results &)>;

/// The table, built once.
class TableBuilder {
public:
  std::map<std::string, OpContract> table;

  void add(const std::string &name, std::vector<OperandSpec> operands,
           size_t results, std::vector<AttrSpec> attrs, Rule rule) {
    OpContract contract;
    contract.name = name;
    contract.operands = std::move(operands);
    contract.results = results;
    contract.attrs = std::move(attrs);
    contract.rule = std::move(rule);
    table.emplace(name, std::move(contract));
  }

  void addCollective(const std::string &name, std::vector<OperandSpec> operands,
                     size_t results, std::vector<AttrSpec> attrs, Rule rule) {
    attrs.insert(attrs.begin(), {"axes", AttrKind::Strings, true});
    add(name, std::move(operands), results, std::move(attrs),
        [rule](const OpInstance &op, Results &out) -> Diagnostic {
          if (op.numAxes() == 0)
            return std::string("expected at least one mesh axis");
          return rule(op, out);
        });
    table[name].collective = true;
  }

  void build();
};

const OperandSpec kInput{"input", OperandKind::Float};
/// Collectives that only move elements take any dtype (token ids too).
const OperandSpec kAnyInput{"input", OperandKind::Any};
const AttrSpec kOptionalAxes{"axes", AttrKind::Strings, false};
/// The sequence in zigzag order of this many chunks (SequenceChunks.h).
const AttrSpec kChunks{"chunks", AttrKind::Int, false};

void TableBuilder::build() {
  using K = AttrKind;
  // Constants and elementwise ops.
  add("fill", {}, 1,
      {{"shape", K::Ints, true}, {"value", K::Real, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        Shape shape = op.ints("shape");
        for (int64_t size : shape)
          if (size < 0)
            return "expected sizes >= 0, found " + formatShape(shape);
        out.push_back(f32(shape));
        return std::nullopt;
      });
  for (const char *name : {"add", "sub", "mul", "div", "maximum", "equal_mask"})
    add(name, {{"lhs"}, {"rhs"}}, 1, {}, binaryRule);
  for (const char *name : {"neg", "exp", "log", "tanh", "sqrt", "rsqrt",
                           "sigmoid", "silu", "gelu", "gelu_tanh", "relu",
                           "softmax"})
    add(name, {kInput}, 1, {}, sameAsInputRule);
  add("scale", {kInput}, 1, {{"factor", K::Real, true}}, sameAsInputRule);
  add("cast", {kInput}, 1, {{"to", K::String, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        std::string to = op.text("to");
        for (ElementType type :
             {ElementType::F32, ElementType::BF16, ElementType::F16})
          if (to == elementTypeName(type)) {
            out.push_back({op.shape(0), type});
            return std::nullopt;
          }
        return "expected a cast to f32, bf16 or f16, found '" + to + "'";
      });
  // A micro-batch's value added into its step total; the runtime sets
  // `first` on each total's first accumulation of the step (which copies).
  add("accumulate", {kInput}, 1, {{"first", K::Bool, false}}, sameAsInputRule);
  add("unary_grad", {kInput, {"result_grad"}}, 1,
      {{"function", K::String, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        if (!isUnaryFunction(op.text("function")))
          return "unknown function '" + op.text("function") + "'";
        TRELLIS_CHECK(expectSameShape(op, 1, "result_grad", 0, "input"));
        out.push_back(op.input(0));
        return std::nullopt;
      });
  add("softmax_grad", {{"result_value"}, {"result_grad"}}, 1, {},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(
            expectSameShape(op, 1, "result_grad", 0, "result_value"));
        out.push_back(op.input(0));
        return std::nullopt;
      });

  // Reductions and broadcasting.
  for (const char *name : {"reduce_sum", "reduce_mean", "reduce_max"})
    add(name, {kInput}, 1,
        {{"dims", K::Ints, true}, {"keep_dims", K::Bool, false}}, reduceRule);
  add("broadcast_to", {kInput}, 1, {{"shape", K::Ints, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        Shape target = op.ints("shape");
        std::optional<Shape> shape = broadcastShapes(op.shape(0), target);
        if (!shape || *shape != target)
          return "cannot broadcast shape " + formatShape(op.shape(0)) +
                 " to " + formatShape(target);
        out.push_back(like(op, 0, target));
        return std::nullopt;
      });

  // Layout.
  add("reshape", {{"input", OperandKind::Any}}, 1, {{"shape", K::Ints, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        Shape to = op.ints("shape");
        int64_t from = 1, count = 1;
        for (int64_t size : op.shape(0))
          from *= size;
        bool valid = true;
        for (int64_t size : to) {
          valid &= size >= 0;
          count *= std::max<int64_t>(size, 0);
        }
        if (!valid || count != from)
          return "cannot reshape " + formatShape(op.shape(0)) + " (" +
                 text(from) + " elements) to " + formatShape(to);
        out.push_back(like(op, 0, to));
        return std::nullopt;
      });
  add("transpose", {kInput}, 1, {{"permutation", K::Ints, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        const Shape &shape = op.shape(0);
        Shape perm = op.ints("permutation");
        std::vector<bool> seen(shape.size(), false);
        bool valid = perm.size() == shape.size();
        Shape result;
        for (int64_t d : perm) {
          if (!valid || d < 0 || d >= static_cast<int64_t>(shape.size()) ||
              seen[d]) {
            valid = false;
            break;
          }
          seen[d] = true;
          result.push_back(shape[d]);
        }
        if (!valid)
          return "expected a permutation of " + text(shape.size()) +
                 " dimensions, found " + formatShape(perm);
        out.push_back(like(op, 0, result));
        return std::nullopt;
      });
  add("slice", {kInput}, 1,
      {{"offsets", K::Ints, true}, {"sizes", K::Ints, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        const Shape &shape = op.shape(0);
        Shape offsets = op.ints("offsets"), sizes = op.ints("sizes");
        if (offsets.size() != shape.size() || sizes.size() != shape.size())
          return "expected " + text(shape.size()) +
                 " offsets and sizes, found " + text(offsets.size()) +
                 " and " + text(sizes.size());
        for (size_t d = 0; d < shape.size(); ++d)
          if (offsets[d] < 0 || sizes[d] < 0 ||
              offsets[d] + sizes[d] > shape[d])
            return "slice [" + text(offsets[d]) + ", " +
                   text(offsets[d] + sizes[d]) + ") of dimension " + text(d) +
                   " is outside [0, " + text(shape[d]) + ")";
        out.push_back(like(op, 0, sizes));
        return std::nullopt;
      });
  add("pad", {kInput}, 1, {{"low", K::Ints, true}, {"high", K::Ints, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        const Shape &shape = op.shape(0);
        Shape low = op.ints("low"), high = op.ints("high");
        if (low.size() != shape.size() || high.size() != shape.size())
          return "expected " + text(shape.size()) +
                 " low and high paddings, found " + text(low.size()) +
                 " and " + text(high.size());
        Shape result;
        for (size_t d = 0; d < shape.size(); ++d) {
          if (low[d] < 0 || high[d] < 0 || low[d] > (int64_t(1) << 36) ||
              high[d] > (int64_t(1) << 36))
            return "expected paddings in [0, 2^36], found low " +
                   formatShape(low) + " high " + formatShape(high);
          result.push_back(low[d] + shape[d] + high[d]);
        }
        out.push_back(like(op, 0, result));
        return std::nullopt;
      });
  add("concat", {{"inputs"}}, 1, {{"dim", K::Int, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        Shape result = op.shape(0);
        int64_t dim = op.integer("dim");
        if (dim < 0 || dim >= static_cast<int64_t>(result.size()))
          return "expected dim in [0, " + text(result.size()) + "), found " +
                 text(dim);
        for (size_t i = 1; i < op.numInputs(); ++i) {
          const Shape &shape = op.shape(i);
          bool compatible = shape.size() == result.size();
          for (size_t d = 0; compatible && d < shape.size(); ++d)
            compatible = static_cast<int64_t>(d) == dim || shape[d] == result[d];
          if (!compatible)
            return "cannot concatenate " + formatShape(op.shape(0)) + " and " +
                   formatShape(shape) + " along dimension " + text(dim);
          result[dim] += shape[dim];
        }
        out.push_back(like(op, 0, result));
        return std::nullopt;
      });
  table["concat"].variadic = true;

  // Elementwise chains fused into one pass (trellis/Common/FusedProgram.h):
  // the inputs broadcast to the result; its dtype is the program's last
  // slot's.
  add("fused_elementwise", {kAnyInput}, 1, {{"program", K::Strings, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        std::vector<ElementType> types;
        Shape shape = op.shape(0);
        for (size_t i = 0; i < op.numInputs(); ++i) {
          types.push_back(op.input(i).element);
          std::optional<Shape> joined = broadcastShapes(shape, op.shape(i));
          if (!joined)
            return "expected inputs that broadcast together, found " +
                   formatShape(shape) + " and " + formatShape(op.shape(i));
          shape = *joined;
        }
        FusedProgram program;
        TRELLIS_CHECK(parseFusedProgram(op.texts("program"), types, program));
        out.push_back({shape, program.resultType()});
        return std::nullopt;
      });
  table["fused_elementwise"].variadic = true;

  // Matmul.
  add("matmul", {{"lhs"}, {"rhs"}}, 1,
      {{"transpose_lhs", K::Bool, false}, {"transpose_rhs", K::Bool, false}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        const Shape &lhs = op.shape(0), &rhs = op.shape(1);
        if (lhs.size() < 2 || rhs.size() < 2)
          return "expected operands of rank >= 2, found " + formatShape(lhs) +
                 " and " + formatShape(rhs);
        if (rhs.size() != 2 && rhs.size() != lhs.size())
          return "expected rhs of rank 2 or " + text(lhs.size()) +
                 " (the rank of lhs), found " + formatShape(rhs);
        Shape batch(lhs.begin(), lhs.end() - 2);
        if (rhs.size() != 2 && Shape(rhs.begin(), rhs.end() - 2) != batch)
          return "expected rhs batch dimensions " + formatShape(batch) +
                 ", found " + formatShape(Shape(rhs.begin(), rhs.end() - 2));
        bool tl = op.flag("transpose_lhs"), tr = op.flag("transpose_rhs");
        int64_t m = lhs[lhs.size() - (tl ? 1 : 2)];
        int64_t k = lhs[lhs.size() - (tl ? 2 : 1)];
        int64_t rk = rhs[rhs.size() - (tr ? 1 : 2)];
        int64_t n = rhs[rhs.size() - (tr ? 2 : 1)];
        if (k != rk)
          return "contracting sizes differ: lhs " + formatShape(lhs) +
                 " has " + text(k) + ", rhs " + formatShape(rhs) + " has " +
                 text(rk);
        Shape result = batch;
        result.push_back(m);
        result.push_back(n);
        out.push_back(like(op, 0, result));
        return std::nullopt;
      });

  // Neural-network layers.
  add("layer_norm", {kInput, {"weight"}, {"bias"}}, 1,
      {{"epsilon", K::Real, true}},
      [](const OpInstance &op, Results &out) {
        return normRule(op, out, true, false);
      });
  add("layer_norm_grad", {kInput, {"weight"}, {"result_grad"}}, 3,
      {{"epsilon", K::Real, true}},
      [](const OpInstance &op, Results &out) {
        return normRule(op, out, true, true);
      });
  add("rms_norm", {kInput, {"weight"}}, 1, {{"epsilon", K::Real, true}},
      [](const OpInstance &op, Results &out) {
        return normRule(op, out, false, false);
      });
  add("rms_norm_grad", {kInput, {"weight"}, {"result_grad"}}, 2,
      {{"epsilon", K::Real, true}},
      [](const OpInstance &op, Results &out) {
        return normRule(op, out, false, true);
      });
  add("embedding", {{"table"}, {"ids", OperandKind::Index}}, 1,
      {{"vocab_offset", K::Int, false}, kOptionalAxes},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(expectRank(op, 0, "table", 2));
        Shape shape = op.shape(1);
        shape.push_back(op.shape(0)[1]);
        out.push_back(like(op, 0, shape));
        return std::nullopt;
      });
  add("embedding_grad", {{"ids", OperandKind::Index}, {"result_grad"}}, 1,
      {{"num_embeddings", K::Int, true},
       {"vocab_offset", K::Int, false},
       kOptionalAxes},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        const Shape &ids = op.shape(0), &grad = op.shape(1);
        if (grad.size() != ids.size() + 1 ||
            Shape(grad.begin(), grad.end() - 1) != ids)
          return "expected result_grad of shape ids " + formatShape(ids) +
                 " + [features], found " + formatShape(grad);
        int64_t rows = op.integer("num_embeddings");
        if (rows < 1 || rows > (int64_t(1) << 32))
          return "expected num_embeddings in [1, 2^32], found " + text(rows);
        out.push_back(like(op, 1, {rows, grad.back()}));
        return std::nullopt;
      });
  add("rope", {kInput}, 1,
      {{"frequencies", K::Reals, true}, {"inverse", K::Bool, false},
       kOptionalAxes, kChunks},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(expectRank(op, 0, "input [batch, seq, heads, dim]", 4));
        int64_t dim = op.shape(0).back();
        if (dim % 2 != 0)
          return "expected an even head dimension, found " + text(dim);
        size_t frequencies = op.reals("frequencies").size();
        if (static_cast<int64_t>(frequencies) != dim / 2)
          return "expected " + text(dim / 2) +
                 " frequencies (half the head dimension), found " +
                 text(frequencies);
        out.push_back(op.input(0));
        return std::nullopt;
      });
  add("attention", {{"query"}, {"key"}, {"value"}}, 1,
      {{"scale", K::Real, true}, {"causal", K::Bool, false}, kOptionalAxes,
       kChunks},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(attentionOperands(op));
        out.push_back(op.input(0));
        return std::nullopt;
      });
  add("attention_grad", {{"query"}, {"key"}, {"value"}, {"result_grad"}}, 3,
      {{"scale", K::Real, true}, {"causal", K::Bool, false}, kOptionalAxes,
       kChunks},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(attentionOperands(op));
        TRELLIS_CHECK(expectSameShape(op, 3, "result_grad", 0, "query"));
        out.push_back(op.input(0));
        out.push_back(op.input(1));
        out.push_back(op.input(2));
        return std::nullopt;
      });
  // Ring attention's pieces (the queries' block against one block of
  // keys, combined by log-sum-exp) and position ids.
  const std::vector<AttrSpec> blockAttrs = {{"scale", K::Real, true},
                                            {"causal", K::Bool, false},
                                            kOptionalAxes,
                                            {"shift", K::Int, true},
                                            kChunks};
  add("attention_block", {{"query"}, {"key"}, {"value"}}, 2, blockAttrs,
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(attentionBlockOperands(op));
        out.push_back(op.input(0));
        out.push_back(logSumExpType(op));
        return std::nullopt;
      });
  add("attention_merge",
      {{"result"}, {"log_sum_exp", OperandKind::Float32}, {"other"},
       {"other_log_sum_exp", OperandKind::Float32}},
      2, {}, [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(expectRank(op, 0, "result [batch, seq, heads, dim]", 4));
        TRELLIS_CHECK(expectSameShape(op, 2, "other", 0, "result"));
        TRELLIS_CHECK(expectLogSumExp(op, 1, "log_sum_exp"));
        TRELLIS_CHECK(expectLogSumExp(op, 3, "other_log_sum_exp"));
        out.push_back(op.input(0));
        out.push_back(op.input(1));
        return std::nullopt;
      });
  add("attention_block_grad",
      {{"query"}, {"key"}, {"value"}, {"result"},
       {"log_sum_exp", OperandKind::Float32}, {"result_grad"}},
      3, blockAttrs, [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(attentionBlockOperands(op));
        TRELLIS_CHECK(expectSameShape(op, 3, "result", 0, "query"));
        TRELLIS_CHECK(expectLogSumExp(op, 4, "log_sum_exp"));
        TRELLIS_CHECK(expectSameShape(op, 5, "result_grad", 0, "query"));
        out.push_back(op.input(0));
        out.push_back(op.input(1));
        out.push_back(op.input(2));
        return std::nullopt;
      });
  add("positions", {}, 1,
      {{"length", K::Int, true}, kChunks, kOptionalAxes},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        int64_t length = op.integer("length");
        if (length < 0)
          return "expected length >= 0, found " + text(length);
        out.push_back({{length}, ElementType::I32});
        return std::nullopt;
      });
  add("cross_entropy", {{"logits"}, {"targets", OperandKind::Index}}, 1,
      {{"normalizer", K::Int, false}, kOptionalAxes},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(targetsOperand(op));
        out.push_back(f32({}));
        return std::nullopt;
      });
  add("cross_entropy_grad",
      {{"logits"},
       {"targets", OperandKind::Index},
       {"loss_grad", OperandKind::Float32}},
      1,
      {{"normalizer", K::Int, false}, kOptionalAxes},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(targetsOperand(op));
        if (!op.shape(2).empty())
          return "expected a scalar loss_grad, found " +
                 formatShape(op.shape(2));
        out.push_back(op.input(0));
        return std::nullopt;
      });
  table["reshape"].sharesOperandBytes = true;
  table["cross_entropy"].reducesOverAxes = true;
  table["cross_entropy_grad"].reducesOverAxes = true;

  // Optimizers.
  add("adamw",
      {{"param", OperandKind::Float32},
       {"grad", OperandKind::Float32},
       {"first_moment", OperandKind::Float32},
       {"second_moment", OperandKind::Float32},
       {"step", OperandKind::Float32}},
      3,
      {{"learning_rate", K::Real, true},
       {"beta1", K::Real, true},
       {"beta2", K::Real, true},
       {"epsilon", K::Real, true},
       {"weight_decay", K::Real, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(expectSameShape(op, 1, "grad", 0, "param"));
        TRELLIS_CHECK(expectSameShape(op, 2, "first_moment", 0, "param"));
        TRELLIS_CHECK(expectSameShape(op, 3, "second_moment", 0, "param"));
        if (!op.shape(4).empty())
          return "expected a scalar step, found " + formatShape(op.shape(4));
        double beta1 = op.real("beta1"), beta2 = op.real("beta2");
        if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) {
          char found[64];
          std::snprintf(found, sizeof(found), "%g and %g", beta1, beta2);
          return std::string("expected betas in [0, 1), found ") + found;
        }
        TRELLIS_CHECK(expectPositive(op, "epsilon"));
        out.assign(3, op.input(0));
        return std::nullopt;
      });
  add("sgd", {{"param", OperandKind::Float32}, {"grad", OperandKind::Float32}},
      1,
      {{"learning_rate", K::Real, true}, {"weight_decay", K::Real, true}},
      [](const OpInstance &op, Results &out) -> Diagnostic {
        TRELLIS_CHECK(expectSameShape(op, 1, "grad", 0, "param"));
        out.push_back(op.input(0));
        return std::nullopt;
      });

  // Collectives and transfers over the mesh axes in `axes`.
  addCollective("all_reduce", {kInput}, 1, {{"kind", K::String, true}},
                [](const OpInstance &op, Results &out) -> Diagnostic {
                  TRELLIS_CHECK(checkReduceKind(op));
                  out.push_back(op.input(0));
                  return std::nullopt;
                });
  addCollective("all_gather", {kAnyInput}, 1, {{"dim", K::Int, true}},
                [](const OpInstance &op, Results &out) -> Diagnostic {
                  TRELLIS_CHECK(checkDim(op, "dim"));
                  Shape result = op.shape(0);
                  result[op.integer("dim")] *= op.groupSize();
                  out.push_back(like(op, 0, result));
                  return std::nullopt;
                });
  addCollective("reduce_scatter", {kInput}, 1,
                {{"kind", K::String, true}, {"dim", K::Int, true}},
                [](const OpInstance &op, Results &out) -> Diagnostic {
                  TRELLIS_CHECK(checkReduceKind(op));
                  TRELLIS_CHECK(checkDim(op, "dim"));
                  int64_t dim = op.integer("dim");
                  TRELLIS_CHECK(checkDivisible(op, dim));
                  Shape result = op.shape(0);
                  result[dim] /= op.groupSize();
                  out.push_back(like(op, 0, result));
                  return std::nullopt;
                });
  addCollective("all_to_all", {kAnyInput}, 1,
                {{"split_dim", K::Int, true}, {"concat_dim", K::Int, true}},
                [](const OpInstance &op, Results &out) -> Diagnostic {
                  TRELLIS_CHECK(checkDim(op, "split_dim"));
                  TRELLIS_CHECK(checkDim(op, "concat_dim"));
                  int64_t split = op.integer("split_dim");
                  int64_t concat = op.integer("concat_dim");
                  TRELLIS_CHECK(checkDivisible(op, split));
                  Shape result = op.shape(0);
                  result[split] /= op.groupSize();
                  result[concat] *= op.groupSize();
                  out.push_back(like(op, 0, result));
                  return std::nullopt;
                });
  addCollective("broadcast", {kAnyInput}, 1, {{"root", K::Int, true}},
                [](const OpInstance &op, Results &out) -> Diagnostic {
                  TRELLIS_CHECK(checkPosition(op, "root"));
                  out.push_back(op.input(0));
                  return std::nullopt;
                });
  addCollective("slice_shard", {kAnyInput}, 1, {{"dim", K::Int, true}},
                [](const OpInstance &op, Results &out) -> Diagnostic {
                  TRELLIS_CHECK(checkDim(op, "dim"));
                  int64_t dim = op.integer("dim");
                  TRELLIS_CHECK(checkDivisible(op, dim));
                  Shape result = op.shape(0);
                  result[dim] /= op.groupSize();
                  out.push_back(like(op, 0, result));
                  return std::nullopt;
                });
  addCollective("collective_permute", {kAnyInput}, 1, {{"shift", K::Int, true}},
                sameAsInputRule);
  addCollective("send", {kAnyInput}, 0,
                {{"peer", K::Int, true},
                 {"channel", K::Int, true},
                 {"complete_with", K::Int, false}},
                [](const OpInstance &op, Results &) {
                  return checkPosition(op, "peer");
                });
  // A receive fills the buffer its send reads (one buffer of the plan), so
  // its result type is that buffer's: the rule checks the peer only.
  addCollective("recv", {}, 1, {{"peer", K::Int, true}, {"channel", K::Int, true}},
                [](const OpInstance &op, Results &) {
                  return checkPosition(op, "peer");
                });
}

} // namespace

std::map<std::string, OpContract> buildOpContracts() {
  TableBuilder builder;
  builder.build();
  return std::move(builder.table);
}

} // namespace trellis
