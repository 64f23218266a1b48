//===- CollectiveLowering.cpp - Plan collectives on any backend -----------===//

#include "trellis/Runtime/CollectiveLowering.h"

#include <algorithm>

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

/// The layout of `parts` equal pieces of a tensor of `shape` along `dim`
/// (elements of `width` bytes): each piece is `rows` rows of `rowBytes`
/// bytes, `stride` bytes apart in the tensor, consecutive when packed.
struct Pieces {
  int64_t rows, rowBytes, stride;

  Pieces(const std::vector<int64_t> &shape, int64_t dim, int64_t parts,
         int64_t width) {
    Split s = splitAt(shape, dim);
    rows = s.outer;
    rowBytes = s.size / parts * s.inner * width;
    stride = s.size * s.inner * width;
  }
};

/// Packs the `parts` pieces of `tensor` along `dim` one after another.
Status pack(CollectiveMemory &memory, const Tensor &tensor, int64_t dim,
            int64_t parts, char *packed) {
  Pieces p(tensor.shape(), dim, parts, dtypeBytes(tensor.desc().dtype));
  const char *rows = static_cast<const char *>(tensor.raw());
  for (int64_t part = 0; part < parts; ++part)
    TRELLIS_RETURN_IF_ERROR(memory.copyRows(
        packed + part * p.rows * p.rowBytes, p.rowBytes,
        rows + part * p.rowBytes, p.stride, p.rowBytes, p.rows));
  return Status::success();
}

/// The inverse of pack: `parts` consecutive pieces become `tensor`,
/// concatenated along `dim`.
Status unpack(CollectiveMemory &memory, const char *packed, int64_t dim,
              int64_t parts, Tensor &tensor) {
  Pieces p(tensor.shape(), dim, parts, dtypeBytes(tensor.desc().dtype));
  char *rows = static_cast<char *>(tensor.raw());
  for (int64_t part = 0; part < parts; ++part)
    TRELLIS_RETURN_IF_ERROR(memory.copyRows(rows + part * p.rowBytes, p.stride,
                                            packed + part * p.rows * p.rowBytes,
                                            p.rowBytes, p.rowBytes, p.rows));
  return Status::success();
}

/// A plain copy of a whole tensor's bytes.
Status copyTensor(CollectiveMemory &memory, Tensor &target,
                  const Tensor &source) {
  return memory.copyRows(target.raw(), 0, source.raw(), 0, source.bytes(), 1);
}

} // namespace

Status runCollective(const KernelArgs &args, CollectiveMemory &memory) {
  const Instruction &instruction = args.instruction;
  const std::string &op = instruction.op;
  // Validation admits collectives of the table alone.
  CollectiveKind collective = *instruction.row().collectiveKind();
  const CollectiveParameters &parameters =
      parametersOf<CollectiveParameters>(args);
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
  auto scratch = [&](int64_t bytes) { return memory.scratch(bytes); };

  if (collective == CollectiveKind::AllReduce) {
    TRELLIS_RETURN_IF_ERROR(copyTensor(memory, *out, *in));
    return comm->allReduce(axes, out->raw(), out->size(), dtype,
                           parameters.kind);
  }
  if (collective == CollectiveKind::Broadcast) {
    TRELLIS_RETURN_IF_ERROR(copyTensor(memory, *out, *in));
    return comm->broadcast(axes, out->raw(), out->size(), dtype,
                           parameters.root);
  }
  if (collective == CollectiveKind::CollectivePermute)
    return comm->permute(axes, in->raw(), out->raw(), in->size(), dtype,
                         parameters.shift);
  if (collective == CollectiveKind::Send)
    return comm->send(axes, in->raw(), in->size(), dtype, parameters.peer,
                      parameters.channel);
  if (collective == CollectiveKind::Recv)
    return comm->recv(axes, out->raw(), out->size(), dtype, parameters.peer,
                      parameters.channel);

  if (collective == CollectiveKind::SliceShard) {
    // This rank's piece along dim: no communication.
    int64_t dim = parameters.dim;
    StatusOr<std::unique_ptr<DeviceAllocation>> packed = scratch(in->bytes());
    if (!packed.ok())
      return packed.status();
    char *pieces = static_cast<char *>((*packed)->data());
    TRELLIS_RETURN_IF_ERROR(pack(memory, *in, dim, group, pieces));
    return memory.copyRows(out->raw(), 0,
                           pieces + comm->groupPosition(axes) * out->bytes(), 0,
                           out->bytes(), 1);
  }
  if (collective == CollectiveKind::AllGather) {
    // Members' pieces arrive one after another; interleave them along dim.
    StatusOr<std::unique_ptr<DeviceAllocation>> gathered =
        scratch(out->bytes());
    if (!gathered.ok())
      return gathered.status();
    char *pieces = static_cast<char *>((*gathered)->data());
    TRELLIS_RETURN_IF_ERROR(
        comm->allGather(axes, in->raw(), pieces, in->size(), dtype));
    return unpack(memory, pieces, parameters.dim, group, *out);
  }
  StatusOr<std::unique_ptr<DeviceAllocation>> packed = scratch(in->bytes());
  StatusOr<std::unique_ptr<DeviceAllocation>> received = scratch(in->bytes());
  if (!packed.ok())
    return packed.status();
  if (!received.ok())
    return received.status();
  char *sent = static_cast<char *>((*packed)->data());
  char *pieces = static_cast<char *>((*received)->data());
  if (collective == CollectiveKind::ReduceScatter) {
    // All-to-all of the pieces, then a reduction in group order: the same
    // traffic as a reduce-scatter, and every member sums alike.
    TRELLIS_RETURN_IF_ERROR(pack(memory, *in, parameters.dim, group, sent));
    TRELLIS_RETURN_IF_ERROR(
        comm->allToAll(axes, sent, pieces, out->size(), dtype));
    ReduceKind kind = parameters.kind;
    TRELLIS_RETURN_IF_ERROR(
        memory.copyRows(out->raw(), 0, pieces, 0, out->bytes(), 1));
    for (int64_t member = 1; member < group; ++member)
      TRELLIS_RETURN_IF_ERROR(memory.reduce(dtype, kind, out->raw(), out->raw(),
                                            pieces + member * out->bytes(),
                                            out->size()));
    return Status::success();
  }
  // all_to_all: split along split_dim, exchange, concatenate along
  // concat_dim.
  TRELLIS_RETURN_IF_ERROR(pack(memory, *in, parameters.splitDim, group, sent));
  TRELLIS_RETURN_IF_ERROR(comm->allToAll(
      axes, sent, pieces, in->size() / std::max<int64_t>(group, 1), dtype));
  return unpack(memory, pieces, parameters.concatDim, group, *out);
}

} // namespace trellis::runtime
