//===- KernelMeasurements.cpp - Matmuls, bandwidth, every plan kernel -----===//
//
// Each measurement launches real instructions through the Device, the way
// the executor does (prepared once, then launched), over buffers of its
// own filled with small positive values (valid for every op: square
// roots, logarithms, token ids of 0), and times them with the device
// synchronized at the end of each timing.
//
//===----------------------------------------------------------------------===//

#include "Measurements.h"

#include "trellis/Common/HalfFloat.h"
#include "trellis/Common/OpContract.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace trellis::runtime::calibration {

StatusOr<double> timeCalls(const std::function<Status()> &run,
                           const std::function<Status()> &finish,
                           double minSeconds, int trials) {
  using Clock = std::chrono::steady_clock;
  auto perCall = [&](int64_t calls) -> StatusOr<double> {
    Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < calls; ++i)
      TRELLIS_RETURN_IF_ERROR(run());
    TRELLIS_RETURN_IF_ERROR(finish());
    std::chrono::duration<double> elapsed = Clock::now() - start;
    return elapsed.count() / static_cast<double>(calls);
  };
  StatusOr<double> warm = perCall(1);
  if (!warm.ok())
    return warm.status();
  int64_t calls =
      static_cast<int64_t>(std::ceil(minSeconds / std::max(*warm, 1e-9)));
  calls = std::clamp<int64_t>(calls, 1, 100000);
  std::vector<double> times;
  for (int trial = 0; trial < std::max(trials, 1); ++trial) {
    StatusOr<double> time = perCall(calls);
    if (!time.ok())
      return time.status();
    times.push_back(*time);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

namespace {

/// Buffers of one instruction, on the device.
struct InstructionBuffers {
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<Tensor> tensors;
};

/// Small positive values of `desc`'s type (0 for integers); a scalar is 1
/// (a step count, a loss scale).
std::vector<char> fillValues(const BufferDesc &desc) {
  int64_t count = desc.numElements();
  std::vector<char> bytes(count * dtypeBytes(desc.dtype), 0);
  for (int64_t i = 0; i < count; ++i) {
    float value = count == 1 ? 1.0f : 0.01f * static_cast<float>(i % 13 + 1);
    switch (desc.dtype) {
    case DType::F32:
      std::memcpy(bytes.data() + 4 * i, &value, 4);
      break;
    case DType::BF16: {
      uint16_t bits = floatToBfloat16(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
      break;
    }
    case DType::F16: {
      uint16_t bits = floatToHalf(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
      break;
    }
    default:
      break;
    }
  }
  return bytes;
}

StatusOr<InstructionBuffers>
allocateBuffers(Device &device, const std::vector<BufferDesc> &descs) {
  InstructionBuffers buffers;
  for (const BufferDesc &desc : descs) {
    int64_t bytes = desc.numElements() * dtypeBytes(desc.dtype);
    StatusOr<std::unique_ptr<DeviceAllocation>> memory =
        device.allocate(std::max<int64_t>(bytes, 1));
    if (!memory.ok())
      return memory.status();
    buffers.tensors.emplace_back(desc, (*memory)->data());
    buffers.memory.push_back(std::move(*memory));
    std::vector<char> values = fillValues(desc);
    TRELLIS_RETURN_IF_ERROR(
        device.copyFromHost(values.data(), buffers.tensors.back()));
  }
  return buffers;
}

/// Seconds one launch of `instruction` over buffers of `descs` takes (the
/// instruction's ids index `descs`).
StatusOr<double> timeInstruction(Device &device, Instruction instruction,
                                 const std::vector<BufferDesc> &descs,
                                 double minSeconds, int trials) {
  // Resolved once, as a loaded plan's are: launches then decode nothing.
  instruction.resolve();
  StatusOr<InstructionBuffers> buffers = allocateBuffers(device, descs);
  if (!buffers.ok())
    return buffers.status();
  // A result the memory plan places in its operand's bytes (a reshape) is
  // measured so too: its kernel then moves nothing.
  const OpContract *contract = findOpContract(instruction.op);
  if (contract && contract->effects.sharesOperandBytes)
    buffers->tensors[instruction.outputs[0]] =
        Tensor(descs[instruction.outputs[0]],
               buffers->tensors[instruction.inputs[0]].raw());
  AxisList noAxes;
  KernelArgs args{instruction, BufferTable(buffers->tensors), noAxes};
  StatusOr<std::unique_ptr<PreparedLaunch>> prepared = device.prepare(args);
  if (!prepared.ok())
    return prepared.status();
  args.prepared = prepared->get();
  return timeCalls([&] { return device.launch(args); },
                   [&] { return device.synchronize(); }, minSeconds, trials);
}

Instruction matmulInstruction() {
  Instruction instruction;
  instruction.op = "matmul";
  instruction.inputs = {0, 1};
  instruction.outputs = {2};
  return instruction;
}

/// Fits the GEMM curve to `points` ({m, k, n, rate}) by least squares on
/// log rates, over half sizes from 0 to 4096.
void fitGemm(GemmFit &fit) {
  auto residuals = [&](double half, double &logPeak) {
    std::vector<double> logs;
    for (const nlohmann::json &point : fit.points) {
      double log = std::log(point[3].get<double>());
      for (int i = 0; i < 3; ++i) {
        double size = point[i].get<double>();
        log -= std::log(size / (size + half));
      }
      logs.push_back(log);
    }
    double mean = 0;
    for (double log : logs)
      mean += log / static_cast<double>(logs.size());
    double squares = 0;
    for (double log : logs)
      squares += (log - mean) * (log - mean);
    logPeak = mean;
    return std::sqrt(squares / static_cast<double>(logs.size()));
  };
  double best = INFINITY;
  for (double half = 0; half <= 4096; half = half < 1 ? 1 : half * 1.05) {
    double logPeak = 0;
    double error = residuals(half, logPeak);
    if (error < best) {
      best = error;
      fit.halfSize = half;
      fit.peak = std::exp(logPeak);
    }
  }
  fit.errorFactor = std::exp(best);
}

/// The matmul sweep of one element type; nullopt when the device's matmul
/// does not take it.
StatusOr<std::optional<GemmFit>> measureGemm(Device &device, DType dtype,
                                             const std::vector<int64_t> &rows,
                                             const std::vector<int64_t> &sizes,
                                             double minSeconds, int trials) {
  GemmFit fit;
  for (int64_t m : rows)
    for (int64_t k : sizes)
      for (int64_t n : sizes) {
        double flops = 2.0 * m * k * n;
        // The largest products add time, not information.
        if (flops > 5e9)
          continue;
        StatusOr<double> seconds =
            timeInstruction(device, matmulInstruction(),
                            {{{m, k}, dtype}, {{k, n}, dtype}, {{m, n}, dtype}},
                            minSeconds, trials);
        if (!seconds.ok()) {
          // A 16-bit type the device's matmul does not take is left out.
          if (fit.points.empty() && dtype != DType::F32)
            return std::optional<GemmFit>();
          return seconds.status().withContext(
              "a " + std::string(dtypeName(dtype)) + " matmul");
        }
        fit.points.push_back({m, k, n, flops / *seconds});
      }
  fitGemm(fit);
  return std::optional<GemmFit>(std::move(fit));
}

/// The op table's cost of `instruction` over `buffers`.
OpCost instructionCost(const Instruction &instruction,
                       const BufferTable &buffers) {
  const OpContract &contract = *findOpContract(instruction.op);
  if (!contract.cost)
    return OpCost();
  std::vector<TensorType> inputs, results;
  for (int64_t id : instruction.inputs)
    inputs.push_back({buffers[id].shape(), buffers[id].desc().dtype});
  for (int64_t id : instruction.outputs)
    results.push_back({buffers[id].shape(), buffers[id].desc().dtype});
  return contract.cost(OpInstance(inputs, instruction.attrs, results));
}

double peakOf(const KernelFigures &figures, const std::string &dtype) {
  auto found = figures.gemm.find(dtype);
  return found == figures.gemm.end() ? figures.gemm.at("f32").peak
                                     : found->second.peak;
}

/// One compute instruction of a plan's step, in the order the step runs
/// them, with its median time over the timed passes.
struct TimedInstruction {
  const Instruction *instruction;
  BufferTable buffers;
  std::unique_ptr<PreparedLaunch> prepared;
  std::vector<double> seconds;
};

/// Runs the step of the one-rank plan at `path` (its compute, in the order
/// of its schedule) `passes` times after one untimed pass, timing each
/// instruction where it runs: its inputs as warm or cold in caches as the
/// step leaves them. Appends each instruction's median time to `timed`.
Status timePlanStep(Device &device, const std::string &path, int passes,
                    std::vector<TimedInstruction> &timed,
                    std::vector<std::unique_ptr<DeviceAllocation>> &memory,
                    std::vector<std::vector<Tensor>> &tensors, Plan &plan) {
  StatusOr<Plan> loaded = loadPlanFile(path);
  if (!loaded.ok())
    return loaded.status().withContext("calibration plan '" + path + "'");
  plan = std::move(*loaded);
  if (plan.stages.size() != 1 || planMesh(plan).size() != 1)
    return Status::error("calibration plan '" + path +
                         "': expected a plan for one rank, found a mesh of " +
                         std::to_string(planMesh(plan).size()) + " ranks");
  tensors.emplace_back();
  std::vector<Tensor> &buffers = tensors.back();
  for (const BufferDesc &desc : plan.buffers) {
    int64_t bytes = desc.numElements() * dtypeBytes(desc.dtype);
    StatusOr<std::unique_ptr<DeviceAllocation>> allocation =
        device.allocate(std::max<int64_t>(bytes, 1));
    if (!allocation.ok())
      return allocation.status();
    buffers.emplace_back(desc, (*allocation)->data());
    memory.push_back(std::move(*allocation));
    std::vector<char> values = fillValues(desc);
    TRELLIS_RETURN_IF_ERROR(device.copyFromHost(values.data(), buffers.back()));
  }
  const StageProgram &stage = plan.stages.front();
  // A result the runtime's memory plan places in its operand's bytes (a
  // reshape) shares them here too: its kernel then moves nothing.
  if (plan.bindings.empty())
    for (const ActionProgram &program : stage.programs)
      for (const Instruction &instruction : program.instructions) {
        const OpContract *contract = findOpContract(instruction.op);
        if (contract && contract->effects.sharesOperandBytes)
          buffers[instruction.outputs[0]] =
              Tensor(buffers[instruction.outputs[0]].desc(),
                     buffers[instruction.inputs[0]].raw());
      }
  size_t first = timed.size();
  AxisList noAxes;
  for (const ScheduledAction &action : stage.schedule) {
    const ActionProgram &program = stage.programs[action.program];
    const std::vector<int64_t> *binding =
        action.microBatch < 0 || plan.bindings.empty()
            ? nullptr
            : &plan.bindings[action.microBatch];
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const Instruction &instruction = action.instruction(program, i);
      const OpContract *contract = findOpContract(instruction.op);
      if (!contract || contract->collective)
        continue;
      TimedInstruction entry{
          &instruction, BufferTable(buffers, binding), nullptr, {}};
      StatusOr<std::unique_ptr<PreparedLaunch>> prepared =
          device.prepare(KernelArgs{instruction, entry.buffers, noAxes});
      if (!prepared.ok())
        return prepared.status();
      entry.prepared = std::move(*prepared);
      timed.push_back(std::move(entry));
    }
  }
  using Clock = std::chrono::steady_clock;
  for (int pass = 0; pass <= passes; ++pass)
    for (size_t i = first; i < timed.size(); ++i) {
      TimedInstruction &entry = timed[i];
      KernelArgs args{*entry.instruction, entry.buffers, noAxes, nullptr,
                      entry.prepared.get()};
      Clock::time_point start = Clock::now();
      TRELLIS_RETURN_IF_ERROR(device.launch(args).withContext(
          "running '" + entry.instruction->op + "' of '" + path + "'"));
      TRELLIS_RETURN_IF_ERROR(device.synchronize());
      if (pass > 0)
        entry.seconds.push_back(
            std::chrono::duration<double>(Clock::now() - start).count());
    }
  for (size_t i = first; i < timed.size(); ++i) {
    std::vector<double> &seconds = timed[i].seconds;
    std::sort(seconds.begin(), seconds.end());
  }
  return Status::success();
}

/// Runs the plans' steps and sets each op's share of its roofline
/// (Cluster.h) from all its executions; the plans' matmuls join the GEMM
/// curve's fit.
Status measurePlanKernels(Device &device, const CalibrationOptions &options,
                          KernelFigures &figures, int passes) {
  std::vector<TimedInstruction> timed;
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<std::vector<Tensor>> tensors;
  tensors.reserve(options.plans.size());
  std::vector<Plan> plans(options.plans.size());
  for (size_t i = 0; i < options.plans.size(); ++i)
    TRELLIS_RETURN_IF_ERROR(timePlanStep(device, options.plans[i], passes,
                                         timed, memory, tensors, plans[i]));
  struct OpTotals {
    double roofline = 0, measured = 0;
    int64_t executions = 0;
  };
  std::map<std::string, OpTotals> totals;
  struct PlanMatmul {
    std::string dtype;
    double m, k, n;
    double rate;
  };
  std::vector<PlanMatmul> planMatmuls;
  for (const TimedInstruction &entry : timed) {
    const Instruction &instruction = *entry.instruction;
    const std::string &op = instruction.op;
    double seconds = entry.seconds[entry.seconds.size() / 2];
    OpCost cost = instructionCost(instruction, entry.buffers);
    // Ops compute in their first operand's type (a fill: its result's).
    const Tensor &lhs =
        entry.buffers[instruction.inputs.empty() ? instruction.outputs.front()
                                                 : instruction.inputs.front()];
    std::string dtype = dtypeName(lhs.desc().dtype);
    const OpContract &row = instruction.row();
    if (row.family == OpFamily::Matmul && !row.effects.accumulates) {
      // A product with a weight (its rows folded together, as the cost
      // query prices it) or a weight's gradient (x^T dy over 2-D rows).
      const Tensor &rhs = entry.buffers[instruction.inputs[1]];
      const MatmulParameters &parameters =
          *instruction.parametersAs<MatmulParameters>();
      bool transposeLhs = parameters.transposeLhs,
           transposeRhs = parameters.transposeRhs;
      if (rhs.shape().size() == 2 && figures.gemm.count(dtype) &&
          (!transposeLhs || lhs.shape().size() == 2)) {
        double k = static_cast<double>(rhs.shape()[transposeRhs ? 1 : 0]);
        double n = static_cast<double>(rhs.shape()[transposeRhs ? 0 : 1]);
        double m = static_cast<double>(lhs.size()) / k;
        planMatmuls.push_back({dtype, m, k, n, cost.flops / seconds});
      }
      continue;
    }
    double bytes = static_cast<double>(cost.bytesRead + cost.bytesWritten);
    double roofline;
    if (row.family == OpFamily::Attention) {
      // Attention is causal unless its instance says otherwise.
      bool causal = instruction.parametersAs<AttentionParameters>()->causal;
      roofline =
          (causal ? cost.flops / 2 : cost.flops) / peakOf(figures, dtype);
    } else {
      roofline = std::max(bytes / figures.memoryBandwidth,
                          cost.flops / peakOf(figures, "f32"));
    }
    if (roofline <= 0)
      continue;
    OpTotals &total = totals[op];
    total.roofline += roofline;
    total.measured += std::max(seconds - figures.kernelOverhead, 1e-9);
    total.executions += 1;
  }
  nlohmann::json ops = nlohmann::json::object();
  for (const auto &[op, total] : totals) {
    // Ops that move nothing measure as launches alone: capped at what a
    // cluster file may hold.
    double efficiency = std::min(total.roofline / total.measured, 100.0);
    figures.opEfficiency[op] = efficiency;
    ops[op] = {{"efficiency", efficiency},
               {"executions", total.executions},
               {"measured_s", total.measured},
               {"roofline_s", total.roofline}};
  }
  if (auto found = figures.opEfficiency.find("attention");
      found != figures.opEfficiency.end())
    figures.attentionEfficiency = std::min(found->second, 1.0);
  figures.record["plan_kernels"] = {{"plans", options.plans},
                                    {"passes", passes},
                                    {"instructions", timed.size()},
                                    {"ops", std::move(ops)}};
  // The sweep's products and the plans' together: the curve's shape and
  // level from both, and how far the plans' own products are from it.
  for (const PlanMatmul &matmul : planMatmuls)
    figures.gemm[matmul.dtype].points.push_back(
        {matmul.m, matmul.k, matmul.n, matmul.rate});
  for (auto &[dtype, fit] : figures.gemm)
    fitGemm(fit);
  std::vector<double> ratios;
  for (const PlanMatmul &matmul : planMatmuls) {
    const GemmFit &fit = figures.gemm[matmul.dtype];
    double rate = fit.peak;
    for (double size : {matmul.m, matmul.k, matmul.n})
      rate *= size / (size + fit.halfSize);
    ratios.push_back(rate / matmul.rate);
  }
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    figures.record["plan_kernels"]["matmul_measured_over_curve"] = {
        {"products", ratios.size()},
        {"min", ratios.front()},
        {"median", ratios[ratios.size() / 2]},
        {"max", ratios.back()}};
  }
  return Status::success();
}

} // namespace

StatusOr<KernelFigures> measureKernels(Device &device,
                                       const CalibrationOptions &options,
                                       bool progress) {
  auto say = [&](const std::string &what) {
    if (progress)
      std::fprintf(stderr, "trellis calibrate: %s\n", what.c_str());
  };
  KernelFigures figures;
  double minSeconds = options.quick ? 0.002 : 0.02;
  int trials = options.quick ? 1 : 3;
  // Matmuls, per element type the device's matmul takes.
  // Training products: rows are a micro-batch's tokens (hundreds and
  // up); depth and columns are hidden sizes, split ones included. The
  // plans' own products join the fit (measurePlanKernels).
  std::vector<int64_t> rows = options.quick
                                  ? std::vector<int64_t>{256}
                                  : std::vector<int64_t>{256, 1024, 4096};
  std::vector<int64_t> sizes = options.quick
                                   ? std::vector<int64_t>{64, 256}
                                   : std::vector<int64_t>{64, 256, 1024, 4096};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    say(std::string(dtypeName(dtype)) + " matmuls");
    // 16-bit products: the larger sizes (their rates), fewer of them.
    bool fewer = dtype != DType::F32 && !options.quick;
    StatusOr<std::optional<GemmFit>> fit = measureGemm(
        device, dtype, fewer ? std::vector<int64_t>{1024} : rows,
        fewer ? std::vector<int64_t>(sizes.begin() + 1, sizes.end()) : sizes,
        minSeconds, trials);
    if (!fit.ok())
      return fit.status();
    // A device without f32 matmuls fails inside measureGemm.
    if (!*fit)
      continue;
    figures.gemm[dtypeName(dtype)] = std::move(**fit);
  }

  // Bandwidth: an add over arrays far larger than caches; a launch: an add
  // of one element.
  say("memory bandwidth, launches");
  Instruction add;
  add.op = "add";
  add.inputs = {0, 1};
  add.outputs = {2};
  int64_t elements = options.quick ? (1 << 20) : (1 << 23);
  BufferDesc large{{elements}, DType::F32};
  StatusOr<double> seconds = timeInstruction(device, add, {large, large, large},
                                             minSeconds * 5, trials);
  if (!seconds.ok())
    return seconds.status().withContext("measuring the memory bandwidth");
  figures.memoryBandwidth =
      3.0 * 4.0 * static_cast<double>(elements) / *seconds;
  BufferDesc one{{1}, DType::F32};
  seconds = timeInstruction(device, add, {one, one, one}, minSeconds, trials);
  if (!seconds.ok())
    return seconds.status().withContext("measuring a launch");
  figures.kernelOverhead = *seconds;
  figures.record["memory_bandwidth"] = {
      {"add_elements", elements}, {"bytes_per_s", figures.memoryBandwidth}};
  figures.record["kernel_overhead_s"] = figures.kernelOverhead;

  if (!options.plans.empty()) {
    say("the plans' kernels");
    TRELLIS_RETURN_IF_ERROR(
        measurePlanKernels(device, options, figures, options.quick ? 1 : 5));
  }
  for (const auto &[dtype, fit] : figures.gemm)
    figures.record["gemm"][dtype] = {{"peak_flops", fit.peak},
                                     {"half_size", fit.halfSize},
                                     {"rms_error_factor", fit.errorFactor},
                                     {"points_m_k_n_flops", fit.points}};
  return figures;
}

} // namespace trellis::runtime::calibration
