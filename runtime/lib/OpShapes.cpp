//===- OpShapes.cpp - Shape rules of plan instructions --------------------===//

#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <functional>
#include <set>

namespace trellis::runtime {

using Shape = std::vector<int64_t>;

std::string formatShape(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool broadcastShapes(const Shape &lhs, const Shape &rhs, Shape &result) {
  size_t rank = std::max(lhs.size(), rhs.size());
  result.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1)
      return false;
    result[i] = l == 1 ? r : l;
  }
  return true;
}

bool isUnaryFunction(const std::string &name) {
  static const std::set<std::string> functions = {
      "neg",     "exp",  "log",  "tanh",      "sqrt", "rsqrt",
      "sigmoid", "silu", "gelu", "gelu_tanh", "relu"};
  return functions.count(name) != 0;
}

namespace {

/// Checks one instruction; each method returns a Status naming what was
/// expected and what was found.
class Checker {
public:
  Checker(const Instruction &instruction,
          const std::vector<BufferDesc> &buffers,
          const std::vector<size_t> &axes, const Mesh &mesh)
      : instruction_(instruction), buffers_(buffers), axes_(axes), mesh_(mesh) {
  }

  /// Ranks in each group along the instruction's axes.
  int64_t groupSize() const { return mesh_.groupSize(axes_); }
  const std::vector<size_t> &axes() const { return axes_; }

  const BufferDesc &in(size_t i) const {
    return buffers_[instruction_.inputs[i]];
  }
  const Shape &inShape(size_t i) const { return in(i).shape; }

  Status arity(int64_t inputs, int64_t outputs) const {
    int64_t foundIn = instruction_.inputs.size();
    int64_t foundOut = instruction_.outputs.size();
    bool inputsOk = inputs < 0 ? foundIn >= -inputs : foundIn == inputs;
    if (!inputsOk || foundOut != outputs)
      return Status::error("expected " +
                           (inputs < 0 ? "at least " + std::to_string(-inputs)
                                       : std::to_string(inputs)) +
                           " inputs and " + std::to_string(outputs) +
                           " outputs, found " + std::to_string(foundIn) +
                           " and " + std::to_string(foundOut));
    return Status::success();
  }

  Status dtype(size_t i, DType expected) const {
    if (in(i).dtype == expected)
      return Status::success();
    return Status::error("expected input " + std::to_string(i) + " of dtype " +
                         dtypeName(expected) + ", found " +
                         dtypeName(in(i).dtype));
  }

  Status allFloat() const {
    for (size_t i = 0; i < instruction_.inputs.size(); ++i)
      TRELLIS_RETURN_IF_ERROR(dtype(i, DType::F32));
    return Status::success();
  }

  Status sameShape(size_t i, size_t reference) const {
    if (inShape(i) == inShape(reference))
      return Status::success();
    return Status::error("expected input " + std::to_string(i) + " of shape " +
                         formatShape(inShape(reference)) + ", found " +
                         formatShape(inShape(i)));
  }

  Status rank(size_t i, size_t expected) const {
    if (inShape(i).size() == expected)
      return Status::success();
    return Status::error("expected input " + std::to_string(i) + " of rank " +
                         std::to_string(expected) + ", found " +
                         formatShape(inShape(i)));
  }

  Status vector(size_t i, int64_t size) const {
    if (inShape(i) == Shape{size})
      return Status::success();
    return Status::error("expected input " + std::to_string(i) + " of shape [" +
                         std::to_string(size) + "], found " +
                         formatShape(inShape(i)));
  }

  Status output(size_t i, const Shape &shape, DType dtype = DType::F32) const {
    const BufferDesc &found = buffers_[instruction_.outputs[i]];
    if (found.shape == shape && found.dtype == dtype)
      return Status::success();
    return Status::error("expected output " + std::to_string(i) + " of shape " +
                         formatShape(shape) + " (" + dtypeName(dtype) +
                         "), found " + formatShape(found.shape) + " (" +
                         dtypeName(found.dtype) + ")");
  }

  /// A required attribute of the given kind (Ints also accepts an empty
  /// array, Real also accepts an integer).
  Status attr(const std::string &name, AttrValue::Kind kind) const {
    auto it = instruction_.attrs.find(name);
    if (it == instruction_.attrs.end())
      return Status::error("missing attribute '" + name + "'");
    AttrValue::Kind found = it->second.kind;
    bool ok =
        found == kind ||
        (kind == AttrValue::Kind::Real && found == AttrValue::Kind::Int) ||
        (kind == AttrValue::Kind::Reals && found == AttrValue::Kind::Ints);
    if (!ok)
      return Status::error("attribute '" + name + "' has the wrong kind");
    return Status::success();
  }

  /// An optional attribute: present means of the given kind.
  Status optionalAttr(const std::string &name, AttrValue::Kind kind) const {
    if (!instruction_.attrs.count(name))
      return Status::success();
    return attr(name, kind);
  }

  const Instruction &instruction() const { return instruction_; }

private:
  const Instruction &instruction_;
  const std::vector<BufferDesc> &buffers_;
  const std::vector<size_t> &axes_;
  const Mesh &mesh_;
};

using Kind = AttrValue::Kind;
using Rule = std::function<Status(const Checker &)>;

Status checkBinary(const Checker &c) {
  TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
  TRELLIS_RETURN_IF_ERROR(c.allFloat());
  Shape result;
  if (!broadcastShapes(c.inShape(0), c.inShape(1), result))
    return Status::error("inputs of shapes " + formatShape(c.inShape(0)) +
                         " and " + formatShape(c.inShape(1)) +
                         " do not broadcast");
  return c.output(0, result);
}

Status checkSameAsInput(const Checker &c) {
  TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
  TRELLIS_RETURN_IF_ERROR(c.allFloat());
  return c.output(0, c.inShape(0));
}

Status checkReduce(const Checker &c) {
  TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
  TRELLIS_RETURN_IF_ERROR(c.allFloat());
  TRELLIS_RETURN_IF_ERROR(c.attr("dims", Kind::Ints));
  TRELLIS_RETURN_IF_ERROR(c.optionalAttr("keep_dims", Kind::Bool));
  const Shape &shape = c.inShape(0);
  const std::vector<int64_t> &dims = c.instruction().ints("dims");
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0 || dims[i] >= static_cast<int64_t>(shape.size()) ||
        (i && dims[i - 1] >= dims[i]))
      return Status::error("expected increasing reduced dimensions in [0, " +
                           std::to_string(shape.size()) + "), found " +
                           formatShape(dims));
  bool keep = c.instruction().flag("keep_dims");
  Shape result;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      result.push_back(shape[d]);
    else if (keep)
      result.push_back(1);
  }
  return c.output(0, result);
}

Status checkNorm(const Checker &c, bool hasBias, bool isGrad) {
  size_t inputs = isGrad ? 3 : (hasBias ? 3 : 2);
  size_t outputs = isGrad ? (hasBias ? 3 : 2) : 1;
  TRELLIS_RETURN_IF_ERROR(c.arity(inputs, outputs));
  TRELLIS_RETURN_IF_ERROR(c.allFloat());
  TRELLIS_RETURN_IF_ERROR(c.attr("epsilon", Kind::Real));
  if (!(c.instruction().real("epsilon") > 0))
    return Status::error("expected epsilon > 0");
  if (c.inShape(0).empty())
    return Status::error("expected an input of rank >= 1");
  int64_t features = c.inShape(0).back();
  TRELLIS_RETURN_IF_ERROR(c.vector(1, features));
  if (isGrad) {
    TRELLIS_RETURN_IF_ERROR(c.sameShape(2, 0));
    TRELLIS_RETURN_IF_ERROR(c.output(0, c.inShape(0)));
    for (size_t i = 1; i < outputs; ++i)
      TRELLIS_RETURN_IF_ERROR(c.output(i, {features}));
    return Status::success();
  }
  if (hasBias)
    TRELLIS_RETURN_IF_ERROR(c.vector(2, features));
  return c.output(0, c.inShape(0));
}

Status checkAttentionOperands(const Checker &c) {
  TRELLIS_RETURN_IF_ERROR(c.allFloat());
  TRELLIS_RETURN_IF_ERROR(c.rank(0, 4));
  TRELLIS_RETURN_IF_ERROR(c.rank(1, 4));
  TRELLIS_RETURN_IF_ERROR(c.sameShape(2, 1));
  TRELLIS_RETURN_IF_ERROR(c.attr("scale", Kind::Real));
  TRELLIS_RETURN_IF_ERROR(c.optionalAttr("causal", Kind::Bool));
  const Shape &q = c.inShape(0), &k = c.inShape(1);
  if (q[0] != k[0] || q[1] != k[1] || q[3] != k[3])
    return Status::error("key " + formatShape(k) + " does not match query " +
                         formatShape(q));
  if (k[2] == 0 || q[2] % k[2] != 0)
    return Status::error("expected kv heads (" + std::to_string(k[2]) +
                         ") to divide query heads (" + std::to_string(q[2]) +
                         ")");
  return Status::success();
}

Status checkTargets(const Checker &c) {
  TRELLIS_RETURN_IF_ERROR(c.dtype(0, DType::F32));
  TRELLIS_RETURN_IF_ERROR(c.dtype(1, DType::I32));
  TRELLIS_RETURN_IF_ERROR(c.optionalAttr("normalizer", Kind::Int));
  TRELLIS_RETURN_IF_ERROR(c.optionalAttr("axes", Kind::Strings));
  if (c.instruction().integer("normalizer") < 0)
    return Status::error("expected normalizer >= 0");
  const Shape &logits = c.inShape(0);
  if (logits.empty() || Shape(logits.begin(), logits.end() - 1) != c.inShape(1))
    return Status::error("targets " + formatShape(c.inShape(1)) +
                         " do not match logits " + formatShape(logits));
  return Status::success();
}

/// What every collective needs: mesh axes, f32 operands, and the listed
/// integer attributes.
Status checkCollective(const Checker &c, int64_t inputs, int64_t outputs,
                       std::initializer_list<const char *> integers) {
  TRELLIS_RETURN_IF_ERROR(c.arity(inputs, outputs));
  TRELLIS_RETURN_IF_ERROR(c.allFloat());
  TRELLIS_RETURN_IF_ERROR(c.attr("axes", Kind::Strings));
  if (c.axes().empty())
    return Status::error("expected at least one mesh axis");
  for (const char *name : integers)
    TRELLIS_RETURN_IF_ERROR(c.attr(name, Kind::Int));
  return Status::success();
}

Status checkReduceKind(const Checker &c) {
  TRELLIS_RETURN_IF_ERROR(c.attr("kind", Kind::String));
  const std::string &kind = c.instruction().text("kind");
  if (kind != "sum" && kind != "max" && kind != "min")
    return Status::error("expected kind sum, max or min, found '" + kind + "'");
  return Status::success();
}

Status checkDim(const Checker &c, const char *name, size_t rank) {
  int64_t dim = c.instruction().integer(name);
  if (dim < 0 || dim >= static_cast<int64_t>(rank))
    return Status::error(std::string(name) + " " + std::to_string(dim) +
                         " is out of range for rank " + std::to_string(rank));
  return Status::success();
}

Status checkDivisible(const Checker &c, int64_t dim) {
  int64_t size = c.inShape(0)[dim];
  if (size % c.groupSize() != 0)
    return Status::error("dimension " + std::to_string(dim) + " of size " +
                         std::to_string(size) +
                         " is not divisible by the group size " +
                         std::to_string(c.groupSize()));
  return Status::success();
}

Status checkPosition(const Checker &c, const char *name) {
  int64_t position = c.instruction().integer(name);
  if (position < 0 || position >= c.groupSize())
    return Status::error(std::string(name) + " " + std::to_string(position) +
                         " is not a position in a group of " +
                         std::to_string(c.groupSize()));
  return Status::success();
}

void addCollectiveRules(std::map<std::string, Rule> &t) {
  t["all_reduce"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 1, {}));
    TRELLIS_RETURN_IF_ERROR(checkReduceKind(c));
    return c.output(0, c.inShape(0));
  };
  t["all_gather"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 1, {"dim"}));
    TRELLIS_RETURN_IF_ERROR(checkDim(c, "dim", c.inShape(0).size()));
    Shape result = c.inShape(0);
    result[c.instruction().integer("dim")] *= c.groupSize();
    return c.output(0, result);
  };
  t["reduce_scatter"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 1, {"dim"}));
    TRELLIS_RETURN_IF_ERROR(checkReduceKind(c));
    TRELLIS_RETURN_IF_ERROR(checkDim(c, "dim", c.inShape(0).size()));
    int64_t dim = c.instruction().integer("dim");
    TRELLIS_RETURN_IF_ERROR(checkDivisible(c, dim));
    Shape result = c.inShape(0);
    result[dim] /= c.groupSize();
    return c.output(0, result);
  };
  t["all_to_all"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(
        checkCollective(c, 1, 1, {"split_dim", "concat_dim"}));
    TRELLIS_RETURN_IF_ERROR(checkDim(c, "split_dim", c.inShape(0).size()));
    TRELLIS_RETURN_IF_ERROR(checkDim(c, "concat_dim", c.inShape(0).size()));
    int64_t split = c.instruction().integer("split_dim");
    int64_t concat = c.instruction().integer("concat_dim");
    TRELLIS_RETURN_IF_ERROR(checkDivisible(c, split));
    Shape result = c.inShape(0);
    result[split] /= c.groupSize();
    result[concat] *= c.groupSize();
    return c.output(0, result);
  };
  t["broadcast"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 1, {"root"}));
    TRELLIS_RETURN_IF_ERROR(checkPosition(c, "root"));
    return c.output(0, c.inShape(0));
  };
  t["slice_shard"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 1, {"dim"}));
    TRELLIS_RETURN_IF_ERROR(checkDim(c, "dim", c.inShape(0).size()));
    int64_t dim = c.instruction().integer("dim");
    TRELLIS_RETURN_IF_ERROR(checkDivisible(c, dim));
    Shape result = c.inShape(0);
    result[dim] /= c.groupSize();
    return c.output(0, result);
  };
  t["collective_permute"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 1, {"shift"}));
    return c.output(0, c.inShape(0));
  };
  t["send"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 1, 0, {"peer", "channel"}));
    return checkPosition(c, "peer");
  };
  t["recv"] = [](const Checker &c) {
    TRELLIS_RETURN_IF_ERROR(checkCollective(c, 0, 1, {"peer", "channel"}));
    return checkPosition(c, "peer");
  };
}

const std::map<std::string, Rule> &rules() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> t;
    t["fill"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(0, 1));
      TRELLIS_RETURN_IF_ERROR(c.attr("shape", Kind::Ints));
      TRELLIS_RETURN_IF_ERROR(c.attr("value", Kind::Real));
      return c.output(0, c.instruction().ints("shape"));
    };
    for (const char *op : {"add", "sub", "mul", "div", "maximum", "equal_mask"})
      t[op] = checkBinary;
    for (const char *op :
         {"neg", "exp", "log", "tanh", "sqrt", "rsqrt", "sigmoid", "silu",
          "gelu", "gelu_tanh", "relu", "softmax"})
      t[op] = checkSameAsInput;
    // The runtime sets `first` on each accumulator's first instruction of
    // the step (which copies; the others add).
    t["accumulate"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("first", Kind::Bool));
      return checkSameAsInput(c);
    };
    t["scale"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.attr("factor", Kind::Real));
      return checkSameAsInput(c);
    };
    t["unary_grad"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.sameShape(1, 0));
      TRELLIS_RETURN_IF_ERROR(c.attr("function", Kind::String));
      if (!isUnaryFunction(c.instruction().text("function")))
        return Status::error("unknown function '" +
                             c.instruction().text("function") + "'");
      return c.output(0, c.inShape(0));
    };
    t["softmax_grad"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.sameShape(1, 0));
      return c.output(0, c.inShape(0));
    };
    for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"})
      t[op] = checkReduce;
    t["broadcast_to"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.attr("shape", Kind::Ints));
      const Shape &target = c.instruction().ints("shape");
      Shape result;
      if (!broadcastShapes(c.inShape(0), target, result) || result != target)
        return Status::error("cannot broadcast " + formatShape(c.inShape(0)) +
                             " to " + formatShape(target));
      return c.output(0, target);
    };
    t["reshape"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
      TRELLIS_RETURN_IF_ERROR(c.attr("shape", Kind::Ints));
      const Shape &target = c.instruction().ints("shape");
      BufferDesc desc{target, c.in(0).dtype};
      if (std::any_of(target.begin(), target.end(),
                      [](int64_t s) { return s < 0; }) ||
          desc.numElements() != c.in(0).numElements())
        return Status::error("cannot reshape " + formatShape(c.inShape(0)) +
                             " to " + formatShape(target));
      return c.output(0, target, c.in(0).dtype);
    };
    t["transpose"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.attr("permutation", Kind::Ints));
      const Shape &perm = c.instruction().ints("permutation");
      const Shape &shape = c.inShape(0);
      std::vector<bool> seen(shape.size(), false);
      Shape result;
      bool valid = perm.size() == shape.size();
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
        return Status::error("expected a permutation of " +
                             std::to_string(shape.size()) +
                             " dimensions, found " + formatShape(perm));
      return c.output(0, result);
    };
    t["slice"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.attr("offsets", Kind::Ints));
      TRELLIS_RETURN_IF_ERROR(c.attr("sizes", Kind::Ints));
      const Shape &shape = c.inShape(0);
      const Shape &offsets = c.instruction().ints("offsets");
      const Shape &sizes = c.instruction().ints("sizes");
      if (offsets.size() != shape.size() || sizes.size() != shape.size())
        return Status::error("expected one offset and size per dimension");
      for (size_t d = 0; d < shape.size(); ++d)
        if (offsets[d] < 0 || sizes[d] < 0 || offsets[d] + sizes[d] > shape[d])
          return Status::error("slice of dimension " + std::to_string(d) +
                               " is outside [0, " + std::to_string(shape[d]) +
                               ")");
      return c.output(0, sizes);
    };
    t["pad"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.attr("low", Kind::Ints));
      TRELLIS_RETURN_IF_ERROR(c.attr("high", Kind::Ints));
      const Shape &shape = c.inShape(0);
      const Shape &low = c.instruction().ints("low");
      const Shape &high = c.instruction().ints("high");
      if (low.size() != shape.size() || high.size() != shape.size())
        return Status::error("expected one low and high padding per dimension");
      Shape result;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (low[d] < 0 || high[d] < 0 || low[d] > (int64_t(1) << 36) ||
            high[d] > (int64_t(1) << 36))
          return Status::error("expected paddings in [0, 2^36]");
        result.push_back(low[d] + shape[d] + high[d]);
      }
      return c.output(0, result);
    };
    t["concat"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(-1, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.attr("dim", Kind::Int));
      Shape result = c.inShape(0);
      int64_t dim = c.instruction().integer("dim");
      if (dim < 0 || dim >= static_cast<int64_t>(result.size()))
        return Status::error("concat dimension " + std::to_string(dim) +
                             " is out of range");
      for (size_t i = 1; i < c.instruction().inputs.size(); ++i) {
        Shape shape = c.inShape(i);
        if (shape.size() != result.size())
          return Status::error("inputs of different ranks");
        for (size_t d = 0; d < shape.size(); ++d)
          if (static_cast<int64_t>(d) != dim && shape[d] != result[d])
            return Status::error("cannot concatenate " +
                                 formatShape(c.inShape(0)) + " and " +
                                 formatShape(shape));
        result[dim] += shape[dim];
      }
      return c.output(0, result);
    };
    t["matmul"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("transpose_lhs", Kind::Bool));
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("transpose_rhs", Kind::Bool));
      const Shape &lhs = c.inShape(0), &rhs = c.inShape(1);
      if (lhs.size() < 2 || (rhs.size() != 2 && rhs.size() != lhs.size()))
        return Status::error("unsupported operand ranks " + formatShape(lhs) +
                             " x " + formatShape(rhs));
      Shape batch(lhs.begin(), lhs.end() - 2);
      if (rhs.size() != 2 && Shape(rhs.begin(), rhs.end() - 2) != batch)
        return Status::error("batch dimensions differ: " + formatShape(lhs) +
                             " x " + formatShape(rhs));
      bool tl = c.instruction().flag("transpose_lhs");
      bool tr = c.instruction().flag("transpose_rhs");
      int64_t m = lhs[lhs.size() - (tl ? 1 : 2)];
      int64_t k = lhs[lhs.size() - (tl ? 2 : 1)];
      int64_t rk = rhs[rhs.size() - (tr ? 1 : 2)];
      int64_t n = rhs[rhs.size() - (tr ? 2 : 1)];
      if (k != rk)
        return Status::error("contracting sizes differ: " + formatShape(lhs) +
                             " x " + formatShape(rhs));
      Shape result = batch;
      result.push_back(m);
      result.push_back(n);
      return c.output(0, result);
    };
    t["layer_norm"] = [](const Checker &c) {
      return checkNorm(c, true, false);
    };
    t["layer_norm_grad"] = [](const Checker &c) {
      return checkNorm(c, true, true);
    };
    t["rms_norm"] = [](const Checker &c) { return checkNorm(c, false, false); };
    t["rms_norm_grad"] = [](const Checker &c) {
      return checkNorm(c, false, true);
    };
    t["embedding"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(c.dtype(0, DType::F32));
      TRELLIS_RETURN_IF_ERROR(c.dtype(1, DType::I32));
      TRELLIS_RETURN_IF_ERROR(c.rank(0, 2));
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("vocab_offset", Kind::Int));
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("axes", Kind::Strings));
      Shape result = c.inShape(1);
      result.push_back(c.inShape(0)[1]);
      return c.output(0, result);
    };
    t["embedding_grad"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(c.dtype(0, DType::I32));
      TRELLIS_RETURN_IF_ERROR(c.dtype(1, DType::F32));
      TRELLIS_RETURN_IF_ERROR(c.attr("num_embeddings", Kind::Int));
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("vocab_offset", Kind::Int));
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("axes", Kind::Strings));
      Shape expected = c.inShape(0);
      if (c.inShape(1).empty())
        return Status::error("expected result_grad of rank >= 1");
      int64_t features = c.inShape(1).back();
      expected.push_back(features);
      if (expected != c.inShape(1))
        return Status::error("result_grad " + formatShape(c.inShape(1)) +
                             " does not match ids " +
                             formatShape(c.inShape(0)));
      int64_t rows = c.instruction().integer("num_embeddings");
      if (rows < 1 || rows > (int64_t(1) << 32))
        return Status::error("expected num_embeddings in [1, 2^32]");
      return c.output(0, {rows, features});
    };
    t["rope"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(1, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.rank(0, 4));
      TRELLIS_RETURN_IF_ERROR(c.attr("frequencies", Kind::Reals));
      TRELLIS_RETURN_IF_ERROR(c.optionalAttr("inverse", Kind::Bool));
      int64_t dim = c.inShape(0)[3];
      if (dim % 2 != 0 ||
          static_cast<int64_t>(c.instruction().reals("frequencies").size()) !=
              dim / 2)
        return Status::error("expected an even head dimension and " +
                             std::to_string(dim / 2) + " frequencies");
      return c.output(0, c.inShape(0));
    };
    t["attention"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(3, 1));
      TRELLIS_RETURN_IF_ERROR(checkAttentionOperands(c));
      return c.output(0, c.inShape(0));
    };
    t["attention_grad"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(4, 3));
      TRELLIS_RETURN_IF_ERROR(checkAttentionOperands(c));
      TRELLIS_RETURN_IF_ERROR(c.sameShape(3, 0));
      TRELLIS_RETURN_IF_ERROR(c.output(0, c.inShape(0)));
      TRELLIS_RETURN_IF_ERROR(c.output(1, c.inShape(1)));
      return c.output(2, c.inShape(2));
    };
    t["cross_entropy"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(checkTargets(c));
      return c.output(0, {});
    };
    t["cross_entropy_grad"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(3, 1));
      TRELLIS_RETURN_IF_ERROR(checkTargets(c));
      TRELLIS_RETURN_IF_ERROR(c.dtype(2, DType::F32));
      if (!c.inShape(2).empty())
        return Status::error("expected a scalar loss gradient");
      return c.output(0, c.inShape(0));
    };
    t["adamw"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(5, 3));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      for (size_t i = 1; i < 4; ++i)
        TRELLIS_RETURN_IF_ERROR(c.sameShape(i, 0));
      if (!c.inShape(4).empty())
        return Status::error("expected a scalar step");
      for (const char *name :
           {"learning_rate", "beta1", "beta2", "epsilon", "weight_decay"})
        TRELLIS_RETURN_IF_ERROR(c.attr(name, Kind::Real));
      for (size_t i = 0; i < 3; ++i)
        TRELLIS_RETURN_IF_ERROR(c.output(i, c.inShape(0)));
      return Status::success();
    };
    t["sgd"] = [](const Checker &c) {
      TRELLIS_RETURN_IF_ERROR(c.arity(2, 1));
      TRELLIS_RETURN_IF_ERROR(c.allFloat());
      TRELLIS_RETURN_IF_ERROR(c.sameShape(1, 0));
      TRELLIS_RETURN_IF_ERROR(c.attr("learning_rate", Kind::Real));
      TRELLIS_RETURN_IF_ERROR(c.attr("weight_decay", Kind::Real));
      return c.output(0, c.inShape(0));
    };
    addCollectiveRules(t);
    return t;
  }();
  return table;
}

} // namespace

bool isCollective(const std::string &op) {
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" ||
         op == "all_to_all" || op == "broadcast" ||
         op == "collective_permute" || op == "send" || op == "recv" ||
         op == "slice_shard";
}

bool isPointToPoint(const std::string &op) {
  return op == "send" || op == "recv";
}

Status validateInstruction(const Instruction &instruction,
                           const std::vector<BufferDesc> &buffers,
                           const std::vector<size_t> &axes, const Mesh &mesh) {
  auto rule = rules().find(instruction.op);
  if (rule == rules().end())
    return Status::error("unknown op '" + instruction.op + "'");
  return rule->second(Checker(instruction, buffers, axes, mesh));
}

} // namespace trellis::runtime
