// RUN: trellis-opt %s -trellis-apply-preset="dp=2 tp=2" | FileCheck %s
// RUN: trellis-opt %s -trellis-apply-preset="dp=2 cp=2" | FileCheck %s --check-prefix=CP
// RUN: trellis-opt %s -trellis-apply-preset | FileCheck %s --check-prefix=NONE
// RUN: trellis-opt %s -trellis-apply-preset="mesh=model:tensor=2,replica:data=2,shard:data=2" | FileCheck %s --check-prefix=ROLES

// Tests that the preset declares the mesh and writes annotations only: the
// inputs' batch over dp, Llama's q/k/v (and gate/up) weights by their output
// rows and o/down by their input columns over tp, the embedding by vocabulary rows; a
// norm weight stays whole.
// CHECK: trellis.mesh @mesh = <["dp"=2, "tp"=2]>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<8x4xf32> {graph.param = "model.layers.0.self_attn.q_proj.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>}
// CHECK-SAME: tensor<4x8xf32> {graph.param = "model.layers.0.self_attn.o_proj.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}
// CHECK-SAME: tensor<4xf32> {graph.param = "model.norm.weight", graph.role = "param"}
// CHECK-SAME: tensor<16x4xf32> {graph.param = "model.embed_tokens.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>}
// CHECK-SAME: tensor<4x8xi32> {graph.param = "tokens", graph.role = "input", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-SAME: tensor<4x8xi32> {graph.param = "targets", graph.role = "input", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-NOT: trellis.all_reduce

// Tests that context parallelism puts a cp axis between dp and tp and splits
// the inputs' sequence over it.
// CP: trellis.mesh @mesh = <["dp"=2, "cp"=2, "tp"=1]>
// CP: graph.param = "tokens", graph.role = "input", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {"cp"}]>

// Tests that the mesh option's axes keep their names, order and roles: the
// batch splits over both data axes, major to minor, the weights over the
// tensor axis.
// ROLES: trellis.mesh @mesh = <["model":tensor=2, "replica":data=2, "shard":data=2]>
// ROLES: graph.param = "model.layers.0.self_attn.q_proj.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"model"}, {}]>
// ROLES: graph.param = "tokens", graph.role = "input", trellis.sharding = #trellis.sharding<@mesh, [{"replica", "shard"}, {}]>

// Tests that a mesh of one device declares nothing.
// NONE-NOT: trellis.mesh
func.func @train_step(%q: tensor<8x4xf32> {graph.role = "param", graph.param = "model.layers.0.self_attn.q_proj.weight"},
                      %o: tensor<4x8xf32> {graph.role = "param", graph.param = "model.layers.0.self_attn.o_proj.weight"},
                      %n: tensor<4xf32> {graph.role = "param", graph.param = "model.norm.weight"},
                      %e: tensor<16x4xf32> {graph.role = "param", graph.param = "model.embed_tokens.weight"},
                      %tokens: tensor<4x8xi32> {graph.role = "input", graph.param = "tokens"},
                      %targets: tensor<4x8xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<8x4xf32> {
  return %q : tensor<8x4xf32>
}
