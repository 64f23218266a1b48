// RUN: trellis-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings))' | FileCheck %s

// Tests that annotations which disagree on one factor are named in a warning:
// the first operand's split wins, the other is resharded.
trellis.mesh @mesh = <["dp"=2, "tp"=2]>
// CHECK-LABEL: func.func @contracting_conflict
func.func @contracting_conflict(
    %x: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>},
    %w: tensor<16x32xf32> {graph.param = "proj.weight", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}) -> tensor<8x32xf32> {
  // expected-warning @+2 {{conflicting annotations: operand 1, argument 1 ("proj.weight"), splits dimension 0 over "dp", but argument 0 splits the same factor over "tp"; operand 1 is resharded}}
  // CHECK: graph.matmul {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {}], partial<sum>={"tp"}>]}
  %0 = graph.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// Tests that a warning is given when a factor cannot take the axes an
// annotation asks for because another factor holds them.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @axes_taken
func.func @axes_taken(
    %x: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>},
    %w: tensor<16x32xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}) -> tensor<8x32xf32> {
  // expected-warning @+2 {{conflicting annotations: operand 1, argument 1, splits dimension 1 over "tp", but the op splits that factor over nothing (its axes are taken by another factor, or do not divide it); operand 1 is resharded}}
  // CHECK: graph.matmul {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{"tp"}, {}]>]}
  %0 = graph.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// Tests that annotations that agree (Megatron's column-parallel weight and its
// bias) raise no warning.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @agreeing
func.func @agreeing(
    %x: tensor<8x16xf32>,
    %w: tensor<16x32xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>},
    %b: tensor<32xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"tp"}]>}) -> tensor<8x32xf32> {
  %0 = graph.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32>
  // CHECK: graph.add {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {"tp"}]>]}
  %1 = graph.add %0, %b : tensor<8x32xf32>, tensor<32xf32>
  return %1 : tensor<8x32xf32>
}

// -----

// Tests that a conflict over a value a constraint laid out (not an argument)
// names the constraint and the op it constrains.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @constrained_conflict
func.func @constrained_conflict(
    %x: tensor<8x32xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>},
    %y: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %0 = graph.exp %y : tensor<8x32xf32>
  %1 = trellis.shard %0 <@mesh, [{"tp"}, {}]> : tensor<8x32xf32>
  // expected-warning @+2 {{conflicting annotations: operand 1, the value laid out by a trellis.shard constraint on the result of 'graph.exp', splits dimension 0 over "tp", but the op splits that factor over nothing (its axes are taken by another factor, or do not divide it); operand 1 is resharded}}
  // CHECK: graph.add {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {"tp"}]>]}
  %2 = graph.add %x, %1 : tensor<8x32xf32>, tensor<8x32xf32>
  return %2 : tensor<8x32xf32>
}
