//===- Collectives.cpp - Plan collectives on a Communicator ---------------===//
//
// Maps the layout semantics of each collective instruction (which dimension
// is gathered, scattered, split, concatenated) onto the flat buffers the
// Communicator moves, packing and unpacking around the exchange.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Collectives.h"

#include <algorithm>
#include <cstring>

namespace trellis::runtime {

namespace {

/// [outer, dim, inner] split of a shape at `dim`.
struct Split {
  int64_t outer = 1, size = 1, inner = 1;
};

Split splitAt(const std::vector<int64_t> &shape, int64_t dim) {
  Split split;
  for (int64_t d = 0; d < dim; ++d)
    split.outer *= shape[d];
  split.size = shape[dim];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    split.inner *= shape[d];
  return split;
}

/// Packs the `parts` equal pieces of `input` along `dim` one after another.
void packAlong(const float *input, const std::vector<int64_t> &shape,
               int64_t dim, int64_t parts, float *packed) {
  Split s = splitAt(shape, dim);
  int64_t row = s.size / parts * s.inner;
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(packed + (part * s.outer + o) * row,
                  input + o * s.size * s.inner + part * row,
                  row * sizeof(float));
}

/// Inverse of packAlong: `parts` consecutive pieces become one tensor of
/// `shape`, concatenated along `dim`.
void unpackAlong(const float *packed, const std::vector<int64_t> &shape,
                 int64_t dim, int64_t parts, float *output) {
  Split s = splitAt(shape, dim);
  int64_t row = s.size / parts * s.inner;
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(output + o * s.size * s.inner + part * row,
                  packed + (part * s.outer + o) * row, row * sizeof(float));
}

ReduceKind parseKind(const std::string &kind) {
  return kind == "max"   ? ReduceKind::Max
         : kind == "min" ? ReduceKind::Min
                         : ReduceKind::Sum;
}

} // namespace

Status runCollective(const Instruction &instruction, const AxisList &axes,
                     std::vector<Tensor> &buffers, Communicator *comm) {
  const std::string &op = instruction.op;
  const Tensor *in =
      instruction.inputs.empty() ? nullptr : &buffers[instruction.inputs[0]];
  Tensor *out =
      instruction.outputs.empty() ? nullptr : &buffers[instruction.outputs[0]];
  if (!comm)
    return Status::error(op + " needs a communicator: run the plan with "
                              "--nproc equal to its mesh size");
  int64_t group = comm->groupSize(axes);

  if (op == "all_reduce") {
    std::memcpy(out->raw(), in->raw(), in->bytes());
    return comm->allReduce(axes, out->f32(), out->size(),
                           parseKind(instruction.text("kind")));
  }
  if (op == "broadcast") {
    std::memcpy(out->raw(), in->raw(), in->bytes());
    return comm->broadcast(axes, out->f32(), out->size(),
                           instruction.integer("root"));
  }
  if (op == "collective_permute")
    return comm->permute(axes, in->f32(), out->f32(), in->size(),
                         instruction.integer("shift"));
  if (op == "send")
    return comm->send(axes, in->f32(), in->size(), instruction.integer("peer"),
                      instruction.integer("channel"));
  if (op == "recv")
    return comm->recv(axes, out->f32(), out->size(),
                      instruction.integer("peer"),
                      instruction.integer("channel"));

  if (op == "slice_shard") {
    // This rank's piece along dim: no communication.
    int64_t dim = instruction.integer("dim");
    std::vector<float> packed(in->size());
    packAlong(in->f32(), in->shape(), dim, group, packed.data());
    std::memcpy(out->raw(),
                packed.data() + comm->groupPosition(axes) * out->size(),
                out->bytes());
    return Status::success();
  }
  if (op == "all_gather") {
    // Members' pieces arrive one after another; interleave them along dim.
    std::vector<float> gathered(out->size());
    TRELLIS_RETURN_IF_ERROR(
        comm->allGather(axes, in->f32(), gathered.data(), in->size()));
    unpackAlong(gathered.data(), out->shape(), instruction.integer("dim"),
                group, out->f32());
    return Status::success();
  }
  if (op == "reduce_scatter") {
    // All-to-all of the pieces, then a reduction in group order: the same
    // traffic as a reduce-scatter, and every member sums alike.
    int64_t dim = instruction.integer("dim");
    std::vector<float> packed(in->size()), received(in->size());
    packAlong(in->f32(), in->shape(), dim, group, packed.data());
    TRELLIS_RETURN_IF_ERROR(
        comm->allToAll(axes, packed.data(), received.data(), out->size()));
    ReduceKind kind = parseKind(instruction.text("kind"));
    float *result = out->f32();
    std::memcpy(result, received.data(), out->bytes());
    for (int64_t member = 1; member < group; ++member) {
      const float *piece = received.data() + member * out->size();
      for (int64_t i = 0; i < out->size(); ++i)
        result[i] = kind == ReduceKind::Sum   ? result[i] + piece[i]
                    : kind == ReduceKind::Max ? std::max(result[i], piece[i])
                                              : std::min(result[i], piece[i]);
    }
    return Status::success();
  }
  // all_to_all: split along split_dim, exchange, concatenate along concat_dim.
  int64_t splitDim = instruction.integer("split_dim");
  int64_t concatDim = instruction.integer("concat_dim");
  std::vector<float> packed(in->size()), received(in->size());
  packAlong(in->f32(), in->shape(), splitDim, group, packed.data());
  TRELLIS_RETURN_IF_ERROR(
      comm->allToAll(axes, packed.data(), received.data(),
                     in->size() / std::max<int64_t>(group, 1)));
  unpackAlong(received.data(), out->shape(), concatDim, group, out->f32());
  return Status::success();
}

} // namespace trellis::runtime
