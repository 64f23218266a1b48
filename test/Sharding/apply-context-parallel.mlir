// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel -trellis-propagate-shardings -trellis-partition | FileCheck %s --check-prefix=PARTITIONED
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=4" -trellis-apply-context-parallel 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="dp=2" -trellis-apply-context-parallel 2>&1 | FileCheck %s --check-prefix=NO-CP
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel="kind=allgather" -trellis-propagate-shardings -trellis-partition | FileCheck %s --check-prefix=ALLGATHER
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel="kind=sliding" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel="kind=ring" | FileCheck %s --check-prefix=RING
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel="kind=ring load-balance=false" | FileCheck %s --check-prefix=RING-PLAIN
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=2" -trellis-apply-context-parallel="kind=ring" -trellis-propagate-shardings -trellis-partition -trellis-lower-ring-attention | FileCheck %s --check-prefix=RING-LOWERED
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="cp=8" -trellis-apply-context-parallel="kind=ring" 2>&1 | FileCheck %s --check-prefix=RING-SEQ

// Tests that the Ulysses preset works: the inputs' sequence is split over cp;
// the 4-D operands of rope and attention are split by heads where they are made
// (the sequence whole), and the partitioner turns sequence pieces into head
// pieces with an all_to_all.
// CHECK: trellis.mesh @mesh = <["dp"=1, "cp"=2, "tp"=1]>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.role = "input", trellis.sharding = #trellis.sharding<@mesh, [{}, {"cp"}]>
// CHECK: %[[Q:.*]] = graph.reshape
// CHECK-NEXT: trellis.shard %[[Q]] <@mesh, [{}, {}, {"cp"}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// PARTITIONED-LABEL: func.func @train_step
// PARTITIONED: trellis.all_to_all %{{.*}} over @mesh ["cp"] split 2 concat 1 {{.*}} : tensor<2x4x2x4xf32> -> tensor<2x8x1x4xf32>
// PARTITIONED: graph.rope {{.*}} : tensor<2x8x1x4xf32>
// PARTITIONED: graph.attention {{.*}} : tensor<2x8x1x4xf32>, tensor<2x8x1x4xf32>
// HEADS: error: 'graph.rope' op Ulysses splits the 2 heads of its operand over tp x cp = 1 x 4: expected heads (kv heads with grouped-query attention) divisible by 4
// NO-CP: error: context parallelism splits the sequence over the "cp" axis: expected cp > 1, found cp=1
// All-gather attention: the keys and values gathered along the sequence,
// the queries (and rope) on this rank's piece, attending from its place
// (the attention names the axes its queries are split over).
// ALLGATHER-LABEL: func.func @train_step
// ALLGATHER: graph.rope {{.*}}axes = ["cp"]{{.*}} : tensor<2x4x2x4xf32>
// ALLGATHER: trellis.all_gather %{{.*}} over @mesh ["cp"] dim 1 {{.*}} : tensor<2x4x2x4xf32> -> tensor<2x8x2x4xf32>
// ALLGATHER: graph.attention {{.*}}axes = ["cp"]{{.*}} : tensor<2x4x2x4xf32>, tensor<2x8x2x4xf32>
// ALLGATHER: graph.attention_grad {{.*}}axes = ["cp"]{{.*}} : tensor<2x4x2x4xf32>, tensor<2x8x2x4xf32>
// ALLGATHER: trellis.reduce_scatter %{{.*}} over @mesh ["cp"] dim 1 sum {{.*}} : tensor<2x8x2x4xf32> -> tensor<2x4x2x4xf32>
// KIND: error: unknown context-parallel kind 'sliding': expected ulysses, allgather or ring

// Ring: the sequence in zigzag order of 2 x cp = 4 chunks (the tokens say
// so to the data loader; rope and attention read positions from it); the
// keys and values whole for the partitioner's gathers, their gradients
// split where attention_grad makes them (its reduce_scatters).
// RING-LABEL: func.func @train_step
// RING-SAME: graph.param = "tokens", graph.role = "input", trellis.sequence_chunks = 4 : i64
// RING: graph.rope {{.*}}chunks = 4 : i64
// RING: trellis.shard %{{.*}} <@mesh, [{}, {}, {}, {}]>
// RING-NOT: trellis.shard
// RING: graph.attention {{.*}}chunks = 4 : i64
// RING: %[[Q:.*]], %[[K:.*]], %[[V:.*]] = graph.attention_grad {{.*}}chunks = 4 : i64
// RING-DAG: trellis.shard %[[V]] <@mesh, [{}, {"cp"}, {}, {}]>
// RING-DAG: trellis.shard %[[K]] <@mesh, [{}, {"cp"}, {}, {}]>
// RING: graph.rope {{.*}}chunks = 4 : i64{{.*}}inverse = true
// Without the balance, natural order.
// RING-PLAIN-LABEL: func.func @train_step
// RING-PLAIN-NOT: chunks
// RING-PLAIN: graph.attention_grad
// RING-PLAIN-NOT: chunks
// The ring: two steps forward and back, the blocks passed on before each
// step computes; the gradients travel with the blocks and hop home.
// RING-LOWERED-LABEL: func.func @train_step
// RING-LOWERED-NOT: all_gather %{{.*}} : tensor<2x4x2x4xf32>
// RING-LOWERED: %[[NEXT:.*]] = trellis.collective_permute %[[KV:.*]] over @mesh ["cp"] shift 1 {{.*}}"forward"
// RING-LOWERED-NEXT: %[[O0:.*]], %[[L0:.*]] = graph.attention_block %[[Q:.*]], %[[KV]], %[[KV]] scale 5.000000e-01 shift 0 {axes = ["cp"], chunks = 4 : i64
// RING-LOWERED-NEXT: %[[O1:.*]], %[[L1:.*]] = graph.attention_block %[[Q]], %[[NEXT]], %[[NEXT]] scale 5.000000e-01 shift 1
// RING-LOWERED-NEXT: %[[O:.*]], %[[L:.*]] = graph.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// RING-LOWERED: %[[BACK:.*]] = trellis.collective_permute %[[KV]] over @mesh ["cp"] shift 1 {{.*}}"backward"
// RING-LOWERED-NEXT: %[[DQ0:.*]], %[[DK0:.*]], %[[DV0:.*]] = graph.attention_block_grad %[[Q]], %[[KV]], %[[KV]], %[[O]], %[[L]], %{{.*}} shift 0
// RING-LOWERED-NEXT: %[[DKA:.*]] = trellis.collective_permute %[[DK0]] over @mesh ["cp"] shift 1
// RING-LOWERED-NEXT: %[[DVA:.*]] = trellis.collective_permute %[[DV0]] over @mesh ["cp"] shift 1
// RING-LOWERED-NEXT: %[[DQ1:.*]], %[[DK1:.*]], %[[DV1:.*]] = graph.attention_block_grad %[[Q]], %[[BACK]], %[[BACK]], %[[O]], %[[L]], %{{.*}} shift 1
// RING-LOWERED-NEXT: graph.add %[[DQ0]], %[[DQ1]]
// RING-LOWERED-NEXT: %[[DK:.*]] = graph.add %[[DKA]], %[[DK1]]
// RING-LOWERED-NEXT: %[[DV:.*]] = graph.add %[[DVA]], %[[DV1]]
// RING-LOWERED-NEXT: trellis.collective_permute %[[DK]] over @mesh ["cp"] shift 1
// RING-LOWERED-NEXT: trellis.collective_permute %[[DV]] over @mesh ["cp"] shift 1
// RING-LOWERED-NOT: graph.attention_grad
// RING-LOWERED-NOT: trellis.reduce_scatter
// RING-SEQ: error: ring attention balances the causal mask by cutting the sequence into 2 x cp = 16 chunks: expected input "tokens" to have a sequence divisible by 16, found 'tensor<2x8xi32>'
func.func @forward(%w: tensor<8x8xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                   %x: tensor<2x8xi32> {graph.role = "input", graph.param = "tokens"},
                   %table: tensor<16x8xf32> {graph.role = "param", graph.param = "table", graph.init = "normal:0.02"}) -> tensor<f32> {
  %e = graph.embedding %table, %x {graph.part = #graph.part<embedding>} : tensor<16x8xf32>, tensor<2x8xi32>
  %h = graph.matmul %e, %w {graph.part = #graph.part<layer 0>} : tensor<2x8x8xf32>, tensor<8x8xf32>
  %q = graph.reshape %h to [2, 8, 2, 4] {graph.part = #graph.part<layer 0>} : tensor<2x8x8xf32>
  %r = graph.rope %q frequencies [1.0, 0.1] {graph.part = #graph.part<layer 0>} : tensor<2x8x2x4xf32>
  %kv = graph.scale %r by 2.0 {graph.part = #graph.part<layer 0>} : tensor<2x8x2x4xf32>
  %a = graph.attention %r, %kv, %kv scale 0.5 {graph.part = #graph.part<layer 0>} : tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>
  %o = graph.reshape %a to [2, 8, 8] {graph.part = #graph.part<layer 0>} : tensor<2x8x2x4xf32>
  %loss = graph.reduce_sum %o dims [0, 1, 2] {graph.part = #graph.part<head>} : tensor<2x8x8xf32>
  return %loss : tensor<f32>
}
