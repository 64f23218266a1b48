// RUN: trellis-opt %s -split-input-file -trellis-lower-ring-attention -verify-diagnostics | FileCheck %s

// Tests that grouped-query attention over a sequence split in 4 (cp) takes 4
// ring steps forward (3 hops of the key and value blocks, each sent before the
// step that precedes its use computes), merged by log-sum-exp; 4 steps back,
// the key and value gradients riding with their blocks (3 hops) and coming home
// (a 4th); no gathers or scatters remain.
trellis.mesh @mesh = <["cp"=4]>

// CHECK-LABEL: func.func @ring
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x4x8xf32>, %[[K:.*]]: tensor<2x4x2x8xf32>, %[[V:.*]]: tensor<2x4x2x8xf32>, %[[DO:.*]]: tensor<2x4x4x8xf32>)
// CHECK-NOT: all_gather
// CHECK: %[[K1:.*]] = trellis.collective_permute %[[K]] over @mesh ["cp"] shift 1
// CHECK-NEXT: %[[V1:.*]] = trellis.collective_permute %[[V]] over @mesh ["cp"] shift 1
// CHECK-NEXT: %[[O0:.*]], %[[L0:.*]] = graph.attention_block %[[Q]], %[[K]], %[[V]] scale 2.500000e-01 shift 0 {axes = ["cp"], chunks = 8 : i64} : tensor<2x4x4x8xf32>, tensor<2x4x2x8xf32>
// CHECK-NEXT: %[[K2:.*]] = trellis.collective_permute %[[K1]]
// CHECK-NEXT: %[[V2:.*]] = trellis.collective_permute %[[V1]]
// CHECK-NEXT: %[[O1:.*]], %[[L1:.*]] = graph.attention_block %[[Q]], %[[K1]], %[[V1]] {{.*}} shift 1
// CHECK-NEXT: %[[M1:.*]], %[[ML1:.*]] = graph.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]] : tensor<2x4x4x8xf32>, tensor<2x4x4xf32>
// CHECK-NEXT: %[[K3:.*]] = trellis.collective_permute %[[K2]]
// CHECK-NEXT: %[[V3:.*]] = trellis.collective_permute %[[V2]]
// CHECK-NEXT: graph.attention_block %[[Q]], %[[K2]], %[[V2]] {{.*}} shift 2
// CHECK-NEXT: graph.attention_merge %[[M1]], %[[ML1]]
// CHECK-NEXT: graph.attention_block %[[Q]], %[[K3]], %[[V3]] {{.*}} shift 3
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = graph.attention_merge
// CHECK: graph.attention_block_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %[[DO]] scale 2.500000e-01 shift 0
// CHECK-COUNT-3: graph.attention_block_grad
// CHECK-COUNT-2: trellis.collective_permute
// CHECK-NOT: trellis.collective_permute
// CHECK: return %[[O]]
func.func @ring(%q: tensor<2x4x4x8xf32>, %k: tensor<2x4x2x8xf32>,
                %v: tensor<2x4x2x8xf32>, %dout: tensor<2x4x4x8xf32>)
    -> (tensor<2x4x4x8xf32>, tensor<2x4x4x8xf32>, tensor<2x4x2x8xf32>,
        tensor<2x4x2x8xf32>) attributes {trellis.partitioned} {
  %kg = trellis.all_gather %k over @mesh ["cp"] dim 1 : tensor<2x4x2x8xf32> -> tensor<2x16x2x8xf32>
  %vg = trellis.all_gather %v over @mesh ["cp"] dim 1 : tensor<2x4x2x8xf32> -> tensor<2x16x2x8xf32>
  %o = graph.attention %q, %kg, %vg scale 0.25 {axes = ["cp"], chunks = 8 : i64} : tensor<2x4x4x8xf32>, tensor<2x16x2x8xf32>
  %dq, %dk, %dv = graph.attention_grad %q, %kg, %vg, %dout scale 0.25 {axes = ["cp"], chunks = 8 : i64} : tensor<2x4x4x8xf32>, tensor<2x16x2x8xf32>
  %dkl = trellis.reduce_scatter %dk over @mesh ["cp"] dim 1 sum : tensor<2x16x2x8xf32> -> tensor<2x4x2x8xf32>
  %dvl = trellis.reduce_scatter %dv over @mesh ["cp"] dim 1 sum : tensor<2x16x2x8xf32> -> tensor<2x4x2x8xf32>
  return %o, %dq, %dkl, %dvl : tensor<2x4x4x8xf32>, tensor<2x4x4x8xf32>, tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>
}

// -----

// Tests that a backward without its forward in the function recomputes the
// forward ring first. Attention whose keys are not gathered over its queries'
// axes is left alone.
trellis.mesh @mesh = <["cp"=2, "tp"=2]>

// CHECK-LABEL: func.func @backward_only
// CHECK: graph.attention_block {{.*}} shift 0
// CHECK: graph.attention_block {{.*}} shift 1
// CHECK: graph.attention_merge
// CHECK: graph.attention_block_grad {{.*}} shift 0
// CHECK: graph.attention_block_grad {{.*}} shift 1
// CHECK-NOT: graph.attention_grad
func.func @backward_only(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>,
                         %dout: tensor<1x4x2x8xf32>)
    -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) {
  %kg = trellis.all_gather %k over @mesh ["cp"] dim 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %dq, %dk, %dv = graph.attention_grad %q, %kg, %kg, %dout scale 0.25 {axes = ["cp"]} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  %dkl = trellis.reduce_scatter %dk over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  %dvl = trellis.reduce_scatter %dv over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  return %dq, %dkl, %dvl : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
}

// CHECK-LABEL: func.func @gathered_elsewhere
// CHECK: trellis.all_gather %{{.*}} over @mesh ["tp"]
// CHECK: graph.attention
// CHECK-NOT: graph.attention_block
func.func @gathered_elsewhere(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>)
    -> tensor<1x4x2x8xf32> {
  %kg = trellis.all_gather %k over @mesh ["tp"] dim 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %o = graph.attention %q, %kg, %kg scale 0.25 {axes = ["cp"]} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  return %o : tensor<1x4x2x8xf32>
}

// -----

// Tests that the ring sends the key gradient home itself: any other use of the
// gathered gradient is an error naming it.
trellis.mesh @mesh = <["cp"=2]>

func.func @gradient_used_whole(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>,
                               %dout: tensor<1x4x2x8xf32>)
    -> (tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x4x2x8xf32>) {
  %kg = trellis.all_gather %k over @mesh ["cp"] dim 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  // expected-error @below {{ring attention returns the key gradient to its block's rank: expected it reduce-scattered (sum) along the sequence over ["cp"], found a use by trellis.all_reduce}}
  %dq, %dk, %dv = graph.attention_grad %q, %kg, %kg, %dout scale 0.25 {axes = ["cp"]} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  %dkw = trellis.all_reduce %dk over @mesh ["cp"] sum : tensor<1x8x2x8xf32>
  %dvl = trellis.reduce_scatter %dv over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  return %dq, %dkw, %dvl : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x4x2x8xf32>
}

// -----

// Tests that a sliding window and soft-capping ride on every ring step, forward
// and backward: each block masks and caps as the whole attention does.
trellis.mesh @mesh = <["cp"=2]>

// CHECK-LABEL: func.func @windowed
// CHECK-COUNT-2: graph.attention_block {{.*}} {axes = ["cp"], softcap = 5.000000e+01 : f64, window = 3 : i64}
// CHECK-COUNT-2: graph.attention_block_grad {{.*}} {axes = ["cp"], softcap = 5.000000e+01 : f64, window = 3 : i64}
func.func @windowed(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>,
                    %v: tensor<1x4x2x8xf32>, %dout: tensor<1x4x2x8xf32>)
    -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>,
        tensor<1x4x2x8xf32>) attributes {trellis.partitioned} {
  %kg = trellis.all_gather %k over @mesh ["cp"] dim 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %vg = trellis.all_gather %v over @mesh ["cp"] dim 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %o = graph.attention %q, %kg, %vg scale 0.25 {axes = ["cp"], softcap = 50.0, window = 3 : i64} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  %dq, %dk, %dv = graph.attention_grad %q, %kg, %vg, %dout scale 0.25 {axes = ["cp"], softcap = 50.0, window = 3 : i64} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  %dkl = trellis.reduce_scatter %dk over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  %dvl = trellis.reduce_scatter %dv over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  return %o, %dq, %dkl, %dvl : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
}

// -----

// Tests that ALiBi's slopes reach every ring step and the sinks only the
// rank's own block (shift 0), whose backward gives their gradient.
trellis.mesh @mesh = <["cp"=2]>

// CHECK-LABEL: func.func @slopes_and_sinks
// CHECK-SAME: %[[SLOPES:[^:]*]]: tensor<2xf32>, %[[SINKS:[^:]*]]: tensor<2xf32>
// CHECK: graph.attention_block {{.*}} slopes %[[SLOPES]] : tensor<2xf32> sinks %[[SINKS]] : tensor<2xf32> scale {{.*}} shift 0
// CHECK: graph.attention_block {{.*}} slopes %[[SLOPES]] : tensor<2xf32> scale {{.*}} shift 1
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[DSINKS:.*]] = graph.attention_block_grad {{.*}} slopes %[[SLOPES]] : tensor<2xf32> sinks %[[SINKS]] : tensor<2xf32> scale {{.*}} shift 0
// CHECK: graph.attention_block_grad {{.*}} slopes %[[SLOPES]] : tensor<2xf32> scale {{.*}} shift 1
// CHECK-NOT: graph.attention_grad
// CHECK: return %{{.*}}, %{{.*}}, %[[DSINKS]]
func.func @slopes_and_sinks(%q: tensor<1x4x2x8xf32>, %k: tensor<1x4x2x8xf32>,
                            %dout: tensor<1x4x2x8xf32>, %slopes: tensor<2xf32>,
                            %sinks: tensor<2xf32>)
    -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<2xf32>) {
  %kg = trellis.all_gather %k over @mesh ["cp"] dim 1 : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
  %o = graph.attention %q, %kg, %kg slopes %slopes : tensor<2xf32> sinks %sinks : tensor<2xf32> scale 0.25 {axes = ["cp"]} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  %dq, %dk, %dv, %ds = graph.attention_grad %q, %kg, %kg, %dout slopes %slopes : tensor<2xf32> sinks %sinks : tensor<2xf32> scale 0.25 {axes = ["cp"]} : tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>
  %dkl = trellis.reduce_scatter %dk over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  %dvl = trellis.reduce_scatter %dv over @mesh ["cp"] dim 1 sum : tensor<1x8x2x8xf32> -> tensor<1x4x2x8xf32>
  return %o, %dq, %ds : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<2xf32>
}
