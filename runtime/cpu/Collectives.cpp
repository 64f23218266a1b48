//===- Collectives.cpp - Plan collectives on host memory ------------------===//
//
// Maps the layout semantics of each collective instruction (which dimension
// is gathered, scattered, split, concatenated) onto the flat buffers the
// Communicator moves, packing and unpacking around the exchange. Buffers
// are moved as bytes, so every dtype is handled alike; reductions go
// through reduceElements.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"

#include <cstring>
#include <vector>

namespace trellis::runtime::cpu {

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

/// Packs the `parts` equal pieces of `input` along `dim` one after another
/// (elements of `width` bytes).
void packAlong(const char *input, const std::vector<int64_t> &shape,
               int64_t dim, int64_t parts, int64_t width, char *packed) {
  Split s = splitAt(shape, dim);
  int64_t row = s.size / parts * s.inner * width;
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(packed + (part * s.outer + o) * row,
                  input + o * s.size * s.inner * width + part * row, row);
}

/// Inverse of packAlong: `parts` consecutive pieces become one tensor of
/// `shape`, concatenated along `dim`.
void unpackAlong(const char *packed, const std::vector<int64_t> &shape,
                 int64_t dim, int64_t parts, int64_t width, char *output) {
  Split s = splitAt(shape, dim);
  int64_t row = s.size / parts * s.inner * width;
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(output + o * s.size * s.inner * width + part * row,
                  packed + (part * s.outer + o) * row, row);
}

ReduceKind parseKind(const std::string &kind) {
  return kind == "max"   ? ReduceKind::Max
         : kind == "min" ? ReduceKind::Min
                         : ReduceKind::Sum;
}

const char *bytesOf(const Tensor &tensor) {
  return static_cast<const char *>(tensor.raw());
}
char *bytesOf(Tensor &tensor) { return static_cast<char *>(tensor.raw()); }

} // namespace

Status runCollective(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  const std::string &op = instruction.op;
  const AxisList &axes = args.axes;
  Communicator *comm = args.comm;
  const Tensor *in = instruction.inputs.empty() ? nullptr : &args.in(0);
  Tensor *out = instruction.outputs.empty() ? nullptr : &args.out(0);
  if (!comm)
    return Status::error(op + " needs a communicator: run the plan with "
                              "--nproc equal to its mesh size");
  int64_t group = comm->groupSize(axes);
  const Tensor &any = in ? *in : *out;
  DType dtype = any.desc().dtype;
  int64_t width = dtypeBytes(dtype);

  if (op == "all_reduce") {
    std::memcpy(out->raw(), in->raw(), in->bytes());
    return comm->allReduce(axes, out->raw(), out->size(), dtype,
                           parseKind(instruction.text("kind")));
  }
  if (op == "broadcast") {
    std::memcpy(out->raw(), in->raw(), in->bytes());
    return comm->broadcast(axes, out->raw(), out->size(), dtype,
                           instruction.integer("root"));
  }
  if (op == "collective_permute")
    return comm->permute(axes, in->raw(), out->raw(), in->size(), dtype,
                         instruction.integer("shift"));
  if (op == "send")
    return comm->send(axes, in->raw(), in->size(), dtype,
                      instruction.integer("peer"),
                      instruction.integer("channel"));
  if (op == "recv")
    return comm->recv(axes, out->raw(), out->size(), dtype,
                      instruction.integer("peer"),
                      instruction.integer("channel"));

  if (op == "slice_shard") {
    // This rank's piece along dim: no communication.
    int64_t dim = instruction.integer("dim");
    std::vector<char> packed(in->bytes());
    packAlong(bytesOf(*in), in->shape(), dim, group, width, packed.data());
    std::memcpy(out->raw(),
                packed.data() + comm->groupPosition(axes) * out->bytes(),
                out->bytes());
    return Status::success();
  }
  if (op == "all_gather") {
    // Members' pieces arrive one after another; interleave them along dim.
    std::vector<char> gathered(out->bytes());
    TRELLIS_RETURN_IF_ERROR(comm->allGather(axes, in->raw(), gathered.data(),
                                            in->size(), dtype));
    unpackAlong(gathered.data(), out->shape(), instruction.integer("dim"),
                group, width, bytesOf(*out));
    return Status::success();
  }
  if (op == "reduce_scatter") {
    // All-to-all of the pieces, then a reduction in group order: the same
    // traffic as a reduce-scatter, and every member sums alike.
    int64_t dim = instruction.integer("dim");
    std::vector<char> packed(in->bytes()), received(in->bytes());
    packAlong(bytesOf(*in), in->shape(), dim, group, width, packed.data());
    TRELLIS_RETURN_IF_ERROR(comm->allToAll(axes, packed.data(),
                                           received.data(), out->size(),
                                           dtype));
    ReduceKind kind = parseKind(instruction.text("kind"));
    std::memcpy(out->raw(), received.data(), out->bytes());
    for (int64_t member = 1; member < group; ++member)
      reduceElements(dtype, kind, out->raw(), out->raw(),
                     received.data() + member * out->bytes(), out->size());
    return Status::success();
  }
  // all_to_all: split along split_dim, exchange, concatenate along concat_dim.
  int64_t splitDim = instruction.integer("split_dim");
  int64_t concatDim = instruction.integer("concat_dim");
  std::vector<char> packed(in->bytes()), received(in->bytes());
  packAlong(bytesOf(*in), in->shape(), splitDim, group, width, packed.data());
  TRELLIS_RETURN_IF_ERROR(
      comm->allToAll(axes, packed.data(), received.data(),
                     in->size() / std::max<int64_t>(group, 1), dtype));
  unpackAlong(received.data(), out->shape(), concatDim, group, width,
              bytesOf(*out));
  return Status::success();
}

} // namespace trellis::runtime::cpu
