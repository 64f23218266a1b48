// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings,trellis-print-sharded-cost))' -verify-diagnostics | FileCheck %s

// Tests that Megatron's MLP on tp = 2 is priced as the partitioner builds it:
// each matmul runs on its half of the weight (2 x 8 x 16 x 16 flops each),
// and the partial result leaves through one all_reduce of 8 x 16 floats.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @megatron_mlp
// expected-remark @+1 {{per rank: 8192 flops, 3072 bytes read, 1024 bytes written; all_reduce over tp: 1 calls, 512 bytes, 512 sent}}
func.func @megatron_mlp(
    %x: tensor<8x16xf32>,
    %w1: tensor<16x32xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>},
    %w2: tensor<32x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>}) -> tensor<8x16xf32> {
  %0 = graph.matmul %x, %w1 : tensor<8x16xf32>, tensor<16x32xf32>
  %1 = graph.matmul %0, %w2 : tensor<8x32xf32>, tensor<32x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

// Tests that a dimension the axis does not divide is priced padded: each
// rank casts its piece of 3 rows (12 flops; 48 bytes read, 24 written), the
// result is gathered as 6 rows (24 bytes handed over, 24 sent) and cut back
// to 5 (a slice reading 48 bytes and writing 40).
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @uneven
// expected-remark @+1 {{per rank: 12 flops, 96 bytes read, 64 bytes written; all_gather over dp: 1 calls, 24 bytes, 24 sent}}
func.func @uneven(
    %x: tensor<5x4xf32> {trellis.padded = array<i64: 5, 4>, trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}) -> tensor<5x4xf16> {
  %0 = graph.cast %x to "f16" : tensor<5x4xf32>
  return %0 : tensor<5x4xf16>
}

// -----

// Tests that in a step of micro-batches an op of one (graph.phase) and what
// is inserted for it count once per micro-batch, and a total over them
// (graph.microbatch_sum) adds each: 4 x (32 flops of the reduction, one
// per element of its 4x8 piece, an all_reduce of its 32 bytes, 8 flops of
// the product) and 4 x 8 of the sum.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @micro_batches
// expected-remark @+1 {{per rank: 192 flops, 896 bytes read, 384 bytes written; all_reduce over dp: 4 calls, 128 bytes, 128 sent}}
func.func @micro_batches(
    %x: tensor<8x8xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>},
    %w: tensor<8xf32>) -> tensor<8xf32> attributes {graph.micro_batches = 4 : i64} {
  %0 = graph.reduce_sum %x dims [0] {graph.phase = "forward"} : tensor<8x8xf32>
  %1 = graph.mul %0, %w {graph.phase = "forward"} : tensor<8xf32>, tensor<8xf32>
  %2 = graph.microbatch_sum %1 : tensor<8xf32>
  return %2 : tensor<8xf32>
}

// -----

// Tests that a step cut into pipeline stages is priced per rank: rank 0
// runs the exponential of each of 2 micro-batches and sends it (128 bytes
// each), rank 1 receives, reduces (32 flops, one per operand element) and
// sums them (1 flop), and sends the total (the step's result, needed on
// rank 0) back once.
// CHECK-LABEL: func.func @pipelined
// expected-remark @+2 {{pipeline rank 0: 64 flops, 256 bytes read, 256 bytes written; recv over pp: 1 calls, 4 bytes, 4 sent; send over pp: 2 calls, 256 bytes, 256 sent}}
// expected-remark @+1 {{pipeline rank 1: 66 flops, 264 bytes read, 16 bytes written; recv over pp: 2 calls, 256 bytes, 256 sent; send over pp: 1 calls, 4 bytes, 4 sent}}
func.func @pipelined(%x: tensor<4x8xf32>) -> tensor<f32>
    attributes {graph.micro_batches = 2 : i64, trellis.pipeline_stages = 2 : i64} {
  %0 = graph.exp %x {graph.phase = "forward", trellis.stage = 0 : i64} : tensor<4x8xf32>
  %1 = graph.reduce_sum %0 dims [0, 1] {graph.phase = "forward", trellis.stage = 1 : i64} : tensor<4x8xf32>
  %2 = graph.microbatch_sum %1 : tensor<f32>
  return %2 : tensor<f32>
}
