//===- Experts.cpp - Mixture-of-experts routing and expert products -------===//
//
// moe_route and its gradient, one token at a time (threads split the
// tokens: each token's result is the same whatever the threads), through
// the formulas the CUDA kernels share (trellis/Common/ExpertRouting.h);
// expert_matmul and its weight gradient as one product per expert over
// its slots' rows, gathered in a stable counting-sort order (token-major,
// then slot) and scattered back, for the experts the weight holds (under
// expert parallelism, the rank's range; with the all-to-all dispatch, the
// slots' rows are first sent to the ranks holding their experts and the
// products sent back); expert_counts; the score bias's update from the
// step's counts.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"
#include "Kernels.h"

#include "trellis/Common/ExpertRouting.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace trellis::runtime::cpu {

namespace {

Status runRoute(const KernelArgs &args) {
  ExpertRouting routing = expertRouting(args);
  const Tensor &logits = args.in(0);
  const float *bias =
      args.instruction.inputs.size() > 1 ? args.in(1).f32() : nullptr;
  int64_t experts = routing.experts;
  int64_t tokens = experts ? logits.size() / experts : 0;
  int64_t k = routing.topK;
  float *weights = args.out(0).f32();
  int32_t *chosen = args.out(1).i32();
#pragma omp parallel if (tokens * experts >= kParallelElements)
  {
    std::vector<float> scratch(routeScratchFloats(routing));
    std::vector<int32_t> intScratch(routeScratchInts(routing));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t)
      routeToken(routing, logits.f32() + t * experts, bias, scratch.data(),
                 intScratch.data(), weights + t * k, chosen + t * k);
  }
  return Status::success();
}

/// Checks that every id of `experts` lies in [0, count).
Status checkExpertIds(const KernelArgs &args, const Tensor &experts,
                      int64_t count) {
  const int32_t *ids = experts.i32();
  for (int64_t s = 0; s < experts.size(); ++s)
    if (ids[s] < 0 || ids[s] >= count)
      return Status::error(args.instruction.op + ": expert id " +
                           std::to_string(ids[s]) + " at slot " +
                           std::to_string(s) + " is outside [0, " +
                           std::to_string(count) + ")");
  return Status::success();
}

Status runRouteGrad(const KernelArgs &args) {
  ExpertRouting routing = expertRouting(args);
  const Tensor &logits = args.in(0), &chosen = args.in(1),
               &weightsGrad = args.in(2);
  int64_t experts = routing.experts;
  int64_t tokens = experts ? logits.size() / experts : 0;
  int64_t k = routing.topK;
  TRELLIS_RETURN_IF_ERROR(checkExpertIds(args, chosen, experts));
  float *out = args.out(0).f32();
#pragma omp parallel if (tokens * experts >= kParallelElements)
  {
    std::vector<float> scores(experts);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t)
      routeTokenGrad(routing, logits.f32() + t * experts, chosen.i32() + t * k,
                     weightsGrad.f32() + t * k, scores.data(),
                     out + t * experts);
  }
  return Status::success();
}

/// The experts an expert op's weight holds: [first, first + count) of
/// `total` (all of them, or under expert parallelism the range at the
/// rank's place along the op's axes).
struct ExpertRange {
  int64_t first = 0, count = 0, total = 0;
};

StatusOr<ExpertRange> expertRange(const KernelArgs &args, int64_t held) {
  StatusOr<int64_t> position = shardPosition(args);
  if (!position.ok())
    return position.status();
  return ExpertRange{*position * held, held, held * shardCount(args)};
}

/// The slots [0, slots) of the range's experts sorted by expert,
/// stable: `order` the slots, `starts[e]` the first of the range's e-th
/// expert's (starts[count]: all of them). Other slots are left out.
void sortSlots(const int32_t *ids, int64_t slots, const ExpertRange &range,
               std::vector<int64_t> &order, std::vector<int64_t> &starts) {
  auto local = [&](int64_t s) { return ids[s] - range.first; };
  auto held = [&](int64_t s) {
    return local(s) >= 0 && local(s) < range.count;
  };
  starts.assign(range.count + 1, 0);
  for (int64_t s = 0; s < slots; ++s)
    if (held(s))
      ++starts[local(s) + 1];
  for (int64_t e = 0; e < range.count; ++e)
    starts[e + 1] += starts[e];
  std::vector<int64_t> next(starts.begin(), starts.end() - 1);
  order.resize(starts.back());
  for (int64_t s = 0; s < slots; ++s)
    if (held(s))
      order[next[local(s)]++] = s;
}

/// Copies the rows of `source` [rows, width] that the sorted slots read
/// into `gathered` [slots, width]: slot s reads row s, or s / k when the
/// source has a row per token.
void gatherRows(const float *source, int64_t width, bool perToken, int64_t k,
                const std::vector<int64_t> &order,
                std::vector<float> &gathered) {
  int64_t slots = static_cast<int64_t>(order.size());
  gathered.resize(slots * width);
#pragma omp parallel for schedule(static) if (slots * width >=                 \
                                              kParallelElements)
  for (int64_t r = 0; r < slots; ++r) {
    int64_t row = perToken ? order[r] / k : order[r];
    std::copy(source + row * width, source + (row + 1) * width,
              gathered.data() + r * width);
  }
}

/// What both expert products start from: the slots of the experts the
/// weight holds (`held` of them, under expert parallelism the rank's
/// range), sorted by expert, and the lhs (operand 0) rows they read, in
/// that order.
struct SortedSlots {
  ExpertRange range;
  std::vector<int64_t> order, starts;
  std::vector<float> rows;
};

/// Sorts `slots` slots of expert ids `ids` whose rows are in `source`
/// (a row per slot, or per token of `k` slots with `perToken`).
SortedSlots sortRows(const ExpertRange &range, const int32_t *ids,
                     int64_t slots, const float *source, int64_t width,
                     bool perToken, int64_t k) {
  SortedSlots sorted;
  sorted.range = range;
  sortSlots(ids, slots, range, sorted.order, sorted.starts);
  gatherRows(source, width, perToken, k, sorted.order, sorted.rows);
  return sorted;
}

/// Expert parallelism's all-to-all dispatch of this rank's slots (an
/// expert op with dispatch = "all_to_all"): each slot goes to the member
/// of the op's group that holds its expert; a member receives its slots
/// member after member in group order, each member's in slot order.
struct SlotExchange {
  /// This rank's slots in the order they are sent.
  std::vector<int64_t> sendOrder;
  /// Slots sent to and received from each member.
  std::vector<int64_t> sendCounts, recvCounts;
  /// The received slots' expert ids, in the order received.
  std::vector<int32_t> received;
};

/// Exchanges the counts and the expert ids of this rank's slots.
StatusOr<SlotExchange> exchangeSlots(const KernelArgs &args,
                                     const Tensor &experts,
                                     const ExpertRange &range) {
  // expertRange has checked the communicator (shardPosition).
  int64_t members = shardCount(args);
  const int32_t *ids = experts.i32();
  SlotExchange exchange;
  std::vector<int32_t> sendCounts(members, 0), recvCounts(members, 0);
  for (int64_t s = 0; s < experts.size(); ++s)
    ++sendCounts[ids[s] / range.count];
  std::vector<int64_t> next(members, 0);
  for (int64_t m = 1; m < members; ++m)
    next[m] = next[m - 1] + sendCounts[m - 1];
  exchange.sendOrder.resize(experts.size());
  std::vector<int32_t> sentIds(experts.size());
  for (int64_t s = 0; s < experts.size(); ++s) {
    int64_t at = next[ids[s] / range.count]++;
    exchange.sendOrder[at] = s;
    sentIds[at] = ids[s];
  }
  TRELLIS_RETURN_IF_ERROR(args.comm->allToAll(
      args.axes, sendCounts.data(), recvCounts.data(), 1, DType::I32));
  exchange.sendCounts.assign(sendCounts.begin(), sendCounts.end());
  exchange.recvCounts.assign(recvCounts.begin(), recvCounts.end());
  int64_t received = 0;
  for (int32_t count : recvCounts)
    received += count;
  exchange.received.resize(received);
  TRELLIS_RETURN_IF_ERROR(args.comm->allToAllV(
      args.axes, sentIds.data(), exchange.sendCounts, exchange.received.data(),
      exchange.recvCounts, DType::I32));
  return exchange;
}

/// Sends each of this rank's slots' row of `source` (a row per slot, or
/// per token of `k` slots with `perToken`) where the exchange sends the
/// slot; `received` gets the rows of the received slots.
Status sendRows(const KernelArgs &args, const SlotExchange &exchange,
                const float *source, int64_t width, bool perToken, int64_t k,
                std::vector<float> &received) {
  std::vector<float> sent;
  gatherRows(source, width, perToken, k, exchange.sendOrder, sent);
  std::vector<int64_t> sendCounts = exchange.sendCounts,
                       recvCounts = exchange.recvCounts;
  for (int64_t &count : sendCounts)
    count *= width;
  for (int64_t &count : recvCounts)
    count *= width;
  received.resize(exchange.received.size() * width);
  return args.comm->allToAllV(args.axes, sent.data(), sendCounts,
                              received.data(), recvCounts, DType::F32);
}

/// The slots an expert op multiplies, sorted by expert: this rank's (the
/// gather dispatch: its operands hold every slot of the group), or with
/// `exchange` set the slots other members sent it (all_to_all).
StatusOr<SortedSlots> sortAndGather(const KernelArgs &args, int64_t held,
                                    std::optional<SlotExchange> &exchange) {
  const Tensor &lhs = args.in(0), &experts = args.in(2);
  StatusOr<ExpertRange> range = expertRange(args, held);
  if (!range.ok())
    return range.status();
  TRELLIS_RETURN_IF_ERROR(checkExpertIds(args, experts, range->total));
  bool perToken = lhs.shape().size() == experts.shape().size();
  int64_t k = experts.shape().back(), depth = lhs.shape().back();
  if (!parametersOf<ExpertParameters>(args).allToAll)
    return sortRows(*range, experts.i32(), experts.size(), lhs.f32(), depth,
                    perToken, k);
  StatusOr<SlotExchange> exchanged = exchangeSlots(args, experts, *range);
  if (!exchanged.ok())
    return exchanged.status();
  exchange = std::move(*exchanged);
  std::vector<float> rows;
  TRELLIS_RETURN_IF_ERROR(
      sendRows(args, *exchange, lhs.f32(), depth, perToken, k, rows));
  return sortRows(*range, exchange->received.data(),
                  static_cast<int64_t>(exchange->received.size()), rows.data(),
                  depth, /*perToken=*/false, 1);
}

Status runExpertMatmul(const KernelArgs &args) {
  const Tensor &weight = args.in(1), &experts = args.in(2);
  Tensor &out = args.out(0);
  bool transposed = parametersOf<ExpertParameters>(args).transposeRhs;
  std::optional<SlotExchange> exchange;
  StatusOr<SortedSlots> sorted =
      sortAndGather(args, weight.shape()[0], exchange);
  if (!sorted.ok())
    return sorted.status();
  const std::vector<int64_t> &order = sorted->order, &starts = sorted->starts;
  int64_t depth = args.in(0).shape().back(), width = out.shape().back();
  std::vector<float> products(order.size() * width);
  for (int64_t e = 0; e < sorted->range.count; ++e) {
    int64_t first = starts[e], n = starts[e + 1] - first;
    if (n == 0)
      continue;
    if (depth == 0) {
      std::fill(products.begin() + first * width,
                products.begin() + (first + n) * width, 0.0f);
      continue;
    }
    const float *matrix = weight.f32() + e * depth * width;
    if (!gemm(false, transposed, n, width, depth, 1.0f,
              sorted->rows.data() + first * depth, depth, matrix,
              transposed ? depth : width, 0.0f, products.data() + first * width,
              width))
      return gemmFailure("expert_matmul");
  }
  int64_t slots = static_cast<int64_t>(order.size());
  // The products in the order of the slots they belong to: this rank's
  // (zeros for experts held elsewhere), or the received ones'.
  std::vector<float> receivedProducts;
  float *result = out.f32();
  if (exchange)
    receivedProducts.resize(exchange->received.size() * width);
  else if (slots < experts.size())
    std::fill(result, result + out.size(), 0.0f);
  float *target = exchange ? receivedProducts.data() : result;
#pragma omp parallel for schedule(static) if (slots * width >=                 \
                                              kParallelElements)
  for (int64_t r = 0; r < slots; ++r)
    std::copy(products.data() + r * width, products.data() + (r + 1) * width,
              target + order[r] * width);
  if (!exchange)
    return Status::success();
  // Each product goes back to the member whose slot it is.
  std::vector<int64_t> backCounts = exchange->recvCounts,
                       homeCounts = exchange->sendCounts;
  for (int64_t &count : backCounts)
    count *= width;
  for (int64_t &count : homeCounts)
    count *= width;
  std::vector<float> home(experts.size() * width);
  TRELLIS_RETURN_IF_ERROR(
      args.comm->allToAllV(args.axes, receivedProducts.data(), backCounts,
                           home.data(), homeCounts, DType::F32));
  for (size_t i = 0; i < exchange->sendOrder.size(); ++i)
    std::copy(home.data() + i * width, home.data() + (i + 1) * width,
              result + exchange->sendOrder[i] * width);
  return Status::success();
}

Status runExpertWeightGrad(const KernelArgs &args) {
  const Tensor &grad = args.in(1);
  Tensor &out = args.out(0);
  bool transposed = parametersOf<ExpertParameters>(args).transposeRhs;
  std::optional<SlotExchange> exchange;
  StatusOr<SortedSlots> sorted = sortAndGather(args, out.shape()[0], exchange);
  if (!sorted.ok())
    return sorted.status();
  const std::vector<int64_t> &starts = sorted->starts;
  int64_t depth = args.in(0).shape().back(), width = grad.shape().back();
  std::vector<float> grads;
  if (exchange) {
    std::vector<float> received;
    TRELLIS_RETURN_IF_ERROR(sendRows(args, *exchange, grad.f32(), width,
                                     /*perToken=*/false, 1, received));
    gatherRows(received.data(), width, /*perToken=*/false, 1, sorted->order,
               grads);
  } else {
    gatherRows(grad.f32(), width, /*perToken=*/false, 1, sorted->order, grads);
  }
  float *result = out.f32();
  int64_t matrix = depth * width;
  for (int64_t e = 0; e < sorted->range.count; ++e) {
    int64_t first = starts[e], n = starts[e + 1] - first;
    float *dw = result + e * matrix;
    if (n == 0 || matrix == 0) {
      std::fill(dw, dw + matrix, 0.0f);
      continue;
    }
    const float *a = sorted->rows.data() + first * depth;
    const float *g = grads.data() + first * width;
    bool ok = transposed ? gemm(true, false, width, depth, n, 1.0f, g, width, a,
                                depth, 0.0f, dw, depth)
                         : gemm(true, false, depth, width, n, 1.0f, a, depth, g,
                                width, 0.0f, dw, width);
    if (!ok)
      return gemmFailure("expert_matmul_weight_grad");
  }
  return Status::success();
}

Status runExpertCounts(const KernelArgs &args) {
  const Tensor &experts = args.in(0);
  Tensor &out = args.out(0);
  int64_t count = out.size();
  TRELLIS_RETURN_IF_ERROR(checkExpertIds(args, experts, count));
  std::vector<int64_t> totals(count, 0);
  for (int64_t s = 0; s < experts.size(); ++s)
    ++totals[experts.i32()[s]];
  for (int64_t e = 0; e < count; ++e)
    out.f32()[e] = static_cast<float>(totals[e]);
  return Status::success();
}

Status runExpertBiasUpdate(const KernelArgs &args) {
  const Tensor &bias = args.in(0), &counts = args.in(1);
  int64_t count = bias.size();
  double total = 0;
  for (int64_t e = 0; e < count; ++e)
    total += counts.f32()[e];
  double mean = count ? total / count : 0,
         rate = parametersOf<ExpertParameters>(args).rate;
  for (int64_t e = 0; e < count; ++e) {
    double offset = mean - counts.f32()[e];
    double sign = offset > 0 ? 1 : offset < 0 ? -1 : 0;
    args.out(0).f32()[e] = static_cast<float>(bias.f32()[e] + rate * sign);
  }
  return Status::success();
}

} // namespace

void registerExpertKernels(KernelTable &table) {
  table.addMember(ExpertKind::Route, runRoute, runRouteGrad);
  table.addMember(ExpertKind::Matmul, runExpertMatmul, runExpertWeightGrad);
  table.addMember(ExpertKind::Counts, runExpertCounts);
  table.addMember(ExpertKind::BiasUpdate, runExpertBiasUpdate);
}

} // namespace trellis::runtime::cpu
