// RUN: trellis-opt %s -split-input-file -verify-diagnostics

// Tests that a mesh axis with an unknown role is rejected.
// expected-error @+1 {{expected a role for mesh axis "rows" (data, tensor, pipeline, context or expert), found 'row'}}
trellis.mesh @mesh = <["rows":row=2]>

// -----

// Tests that a mesh axis declared twice is rejected.
// expected-error @+1 {{mesh axis "dp" is declared twice}}
trellis.mesh @mesh = <["dp"=2, "tp"=2, "dp"=4]>

// -----

// Tests that a mesh axis of size 0 is rejected.
// expected-error @+1 {{expected mesh axis "tp" to have a size >= 1, found 0}}
trellis.mesh @mesh = <["dp"=2, "tp"=0]>

// -----

// Tests that a mesh needs at least one axis.
// expected-error @+1 {{expected at least one mesh axis, found none}}
trellis.mesh @mesh = <[]>

// -----

// Tests that a mesh with a malformed axis is a parse error.
// expected-error @+1 {{expected '='}}
trellis.mesh @mesh = <["dp" 2]>

// -----

// Tests that a sharding naming an unknown mesh is rejected.
func.func @unknown_mesh(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.shard' op unknown mesh @nowhere}}
  %0 = trellis.shard %arg0 <@nowhere, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a sharding naming an unknown mesh axis is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @unknown_axis(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.shard' op unknown mesh axis "sp" in mesh @mesh (axes: "dp", "tp")}}
  %0 = trellis.shard %arg0 <@mesh, [{"sp"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that an unknown partial axis is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @unknown_partial_axis(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.shard' op unknown mesh axis "pp" in mesh @mesh (axes: "dp", "tp")}}
  %0 = trellis.shard %arg0 <@mesh, [{}], partial<sum>={"pp"}> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that an axis splitting two dimensions is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @axis_twice(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{mesh axis "tp" is used twice: it splits dimension 0 and dimension 1}}
  %0 = trellis.shard %arg0 <@mesh, [{"tp"}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that an axis listed twice in one dimension is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @axis_twice_in_dim(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{mesh axis "tp" is used twice: it splits dimension 0 and dimension 0}}
  %0 = trellis.shard %arg0 <@mesh, [{"tp", "tp"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that an axis both splitting a dimension and partial is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @split_and_partial(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{mesh axis "tp" is both splitting dimension 1 and partial}}
  %0 = trellis.shard %arg0 <@mesh, [{}, {"tp"}], partial<sum>={"tp"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that a partial axis listed twice is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @partial_twice(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{mesh axis "dp" is listed twice as partial}}
  %0 = trellis.shard %arg0 <@mesh, [{}, {}], partial<sum>={"dp", "dp"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that an unknown reduction kind is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @bad_kind(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{expected a reduction kind (sum, max, min), found 'avg'}}
  %0 = trellis.shard %arg0 <@mesh, [{}, {}], partial<avg>={"dp"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that a dimension not divisible by its axis is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @not_divisible(%arg0: tensor<8x30xf32>) -> tensor<8x30xf32> {
  // expected-error @+1 {{'trellis.shard' op dimension 1 of size 30 is not divisible by mesh axis "tp" of size 4}}
  %0 = trellis.shard %arg0 <@mesh, [{}, {"tp"}]> : tensor<8x30xf32>
  return %0 : tensor<8x30xf32>
}

// -----

// Tests that a dimension not divisible by the product of its axes is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @not_divisible_product(%arg0: tensor<12x8xf32>) -> tensor<12x8xf32> {
  // expected-error @+1 {{'trellis.shard' op dimension 0 of size 12 is not divisible by mesh axes "dp", "tp" of total size 8}}
  %0 = trellis.shard %arg0 <@mesh, [{"dp", "tp"}, {}]> : tensor<12x8xf32>
  return %0 : tensor<12x8xf32>
}

// -----

// Tests that a sharding whose rank differs from the tensor's is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @rank_mismatch(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.shard' op sharding has 2 dimensions but the tensor 'tensor<8xf32>' has rank 1}}
  %0 = trellis.shard %arg0 <@mesh, [{}, {}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a dynamic dimension cannot be split.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @dynamic_split(%arg0: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'trellis.shard' op dimension 0 is dynamic but split over mesh axes "dp": expected a static size}}
  %0 = trellis.shard %arg0 <@mesh, [{"dp"}, {}]> : tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// Tests that argument shardings are checked against the argument type.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
// expected-error @+1 {{'func.func' op argument 0: dimension 0 of size 6 is not divisible by mesh axis "tp" of size 4}}
func.func @bad_argument(%arg0: tensor<6xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"tp"}]>}) {
  return
}

// -----

// Tests that trellis.padded names the global shape of its value.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
// expected-error @+1 {{'func.func' op expected 'trellis.padded' to be the global shape of a 'tensor<6xf32>', found array<i64: 6, 1>}}
func.func @bad_padded(%arg0: tensor<6xf32> {trellis.padded = array<i64: 6, 1>, trellis.sharding = #trellis.sharding<@mesh, [{"tp"}]>}) {
  return
}

// -----

// Tests that a padded split still splits a dimension over one axis.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
// expected-error @+1 {{'func.func' op argument 0: dimension 0 of size 6 is not divisible by mesh axes "dp", "tp" of total size 8}}
func.func @padded_over_two_axes(%arg0: tensor<6xf32> {trellis.padded = array<i64: 6>, trellis.sharding = #trellis.sharding<@mesh, [{"dp", "tp"}]>}) {
  return
}

// -----

// Tests that result shardings are checked against the result type.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
// expected-error @+1 {{'func.func' op result 0: unknown mesh @other}}
func.func private @bad_result() -> (tensor<8xf32> {trellis.sharding = #trellis.sharding<@other, [{"tp"}]>})

// -----

// Tests that the sharding attribute must hold a sharding.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
// expected-error @+1 {{'func.func' op expected 'trellis.sharding' on argument 0 to be a #trellis.sharding, found 3 : i64}}
func.func @not_a_sharding(%arg0: tensor<8xf32> {trellis.sharding = 3}) {
  return
}

// -----

// Tests that unknown trellis argument attributes are rejected.
// expected-error @+1 {{'func.func' op unknown trellis attribute 'trellis.shardng' on argument 0; expected 'trellis.sharding'}}
func.func @misspelled(%arg0: tensor<8xf32> {trellis.shardng = 3}) {
  return
}

// -----

// Tests that a sharding on a scalar argument is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
// expected-error @+1 {{'func.func' op argument 0: expected a ranked tensor to carry a sharding, found 'f32'}}
func.func @scalar(%arg0: f32 {trellis.sharding = #trellis.sharding<@mesh, []>}) {
  return
}

// -----

// Tests that a collective over an unknown mesh is rejected.
func.func @collective_unknown_mesh(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.all_reduce' op unknown mesh @mesh}}
  %0 = trellis.all_reduce %arg0 over @mesh ["tp"] sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective over an unknown axis is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @collective_unknown_axis(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.all_reduce' op unknown mesh axis "x" in mesh @mesh}}
  %0 = trellis.all_reduce %arg0 over @mesh ["x"] sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective listing an axis twice is rejected.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @collective_axis_twice(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.all_reduce' op mesh axis "tp" is listed twice}}
  %0 = trellis.all_reduce %arg0 over @mesh ["tp", "tp"] sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective needs at least one axis.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @collective_no_axis(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.all_reduce' op expected at least one mesh axis, found none}}
  %0 = trellis.all_reduce %arg0 over @mesh [] sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a collective's element type is one plans hold.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @collective_f64(%arg0: tensor<8xf64>) -> tensor<8xf64> {
  // expected-error @+1 {{'trellis.all_reduce' op expected an operand of f32, bf16, f16 or i32, found 'tensor<8xf64>'}}
  %0 = trellis.all_reduce %arg0 over @mesh ["tp"] sum : tensor<8xf64>
  return %0 : tensor<8xf64>
}

// -----

// Tests that all_gather's result must grow by the group size.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @gather_shape(%arg0: tensor<8x4xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'trellis.all_gather' op expected result type 'tensor<8x16xf32>' (the op table's all_gather over a group of 4), found 'tensor<8x8xf32>'}}
  %0 = trellis.all_gather %arg0 over @mesh ["tp"] dim 1 : tensor<8x4xf32> -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that all_gather's result keeps the element type.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @gather_element_type(%arg0: tensor<8x4xf32>) -> tensor<8x16xf16> {
  // expected-error @+1 {{'trellis.all_gather' op expected result type 'tensor<8x16xf32>' (the op table's all_gather over a group of 4), found 'tensor<8x16xf16>'}}
  %0 = trellis.all_gather %arg0 over @mesh ["tp"] dim 1 : tensor<8x4xf32> -> tensor<8x16xf16>
  return %0 : tensor<8x16xf16>
}

// -----

// Tests that all_gather's dimension must exist.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @gather_dim(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'trellis.all_gather' op expected dim in [0, 2), found 2 (the group of mesh axes ["tp"])}}
  %0 = trellis.all_gather %arg0 over @mesh ["tp"] dim 2 : tensor<8x4xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Tests that reduce_scatter needs a divisible dimension.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @scatter_divisible(%arg0: tensor<6x4xf32>) -> tensor<1x4xf32> {
  // expected-error @+1 {{'trellis.reduce_scatter' op dimension 0 of size 6 is not divisible by the group size 4 (the group of mesh axes ["tp"])}}
  %0 = trellis.reduce_scatter %arg0 over @mesh ["tp"] dim 0 sum : tensor<6x4xf32> -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}

// -----

// Tests that reduce_scatter's result must shrink by the group size.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @scatter_shape(%arg0: tensor<8x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'trellis.reduce_scatter' op expected result type 'tensor<1x4xf32>' (the op table's reduce_scatter over a group of 8), found 'tensor<4x4xf32>'}}
  %0 = trellis.reduce_scatter %arg0 over @mesh ["dp", "tp"] dim 0 sum : tensor<8x4xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// Tests that all_to_all's result follows from its split and concat dims.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @all_to_all_shape(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'trellis.all_to_all' op expected result type 'tensor<2x16xf32>' (the op table's all_to_all over a group of 4), found 'tensor<8x4xf32>'}}
  %0 = trellis.all_to_all %arg0 over @mesh ["tp"] split 0 concat 1 : tensor<8x4xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Tests that all_to_all needs a split dimension divisible by the group.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @all_to_all_divisible(%arg0: tensor<8x6xf32>) -> tensor<32x1xf32> {
  // expected-error @+1 {{'trellis.all_to_all' op dimension 1 of size 6 is not divisible by the group size 4 (the group of mesh axes ["tp"])}}
  %0 = trellis.all_to_all %arg0 over @mesh ["tp"] split 1 concat 0 : tensor<8x6xf32> -> tensor<32x1xf32>
  return %0 : tensor<32x1xf32>
}

// -----

// Tests that all_to_all's concat dimension must exist.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @all_to_all_dim(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'trellis.all_to_all' op expected concat_dim in [0, 2), found -1 (the group of mesh axes ["tp"])}}
  %0 = trellis.all_to_all %arg0 over @mesh ["tp"] split 0 concat -1 : tensor<8x4xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Tests that all_reduce keeps its operand type.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @all_reduce_type(%arg0: tensor<8x4xf32>) -> tensor<8x4xf16> {
  // expected-error @+1 {{'trellis.all_reduce' op requires the same type for all operands and results}}
  %0 = "trellis.all_reduce"(%arg0) <{mesh = @mesh, axes = ["tp"], kind = #trellis<reduction sum>}> : (tensor<8x4xf32>) -> tensor<8x4xf16>
  return %0 : tensor<8x4xf16>
}

// -----

// Tests that a broadcast root must be a position in the group.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @broadcast_root(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.broadcast' op root 2 is not a position in a group of 2 (the group of mesh axes ["dp"])}}
  %0 = trellis.broadcast %arg0 over @mesh ["dp"] root 2 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a send peer must be a position in the group.
trellis.mesh @mesh = <["pp"=4]>
func.func @send_peer(%arg0: tensor<8xf32>) {
  // expected-error @+1 {{'trellis.send' op peer 4 is not a position in a group of 4 (the group of mesh axes ["pp"])}}
  trellis.send %arg0 to @mesh ["pp"] peer 4 channel 0 : tensor<8xf32>
  return
}

// -----

// Tests that a recv channel must not be negative.
trellis.mesh @mesh = <["pp"=4]>
func.func @recv_channel() -> tensor<8xf32> {
  // expected-error @+1 {{'trellis.recv' op expected a channel >= 0, found -1 (the group of mesh axes ["pp"])}}
  %0 = trellis.recv from @mesh ["pp"] peer 0 channel -1 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that collectives need statically shaped tensors.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>
func.func @dynamic_collective(%arg0: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{'trellis.all_reduce' op operand #0 must be statically shaped tensor of any type values, but got 'tensor<?xf32>'}}
  %0 = trellis.all_reduce %arg0 over @mesh ["tp"] sum : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

// Tests that a mesh lives at module level.
func.func @nested_mesh() {
  // expected-error @+1 {{'trellis.mesh' op expects parent op 'builtin.module'}}
  trellis.mesh @mesh = <["dp"=2]>
  return
}

// -----

// Tests that trellis.partitioned is a unit attribute of functions.
trellis.mesh @mesh = <["dp"=2]>
// expected-error @+1 {{'func.func' op 'trellis.partitioned' is a unit attribute of functions}}
func.func @bad_partitioned() attributes {trellis.partitioned = 1} {
  return
}

// -----

// Tests that unknown trellis attributes on operations are rejected.
// expected-error @+1 {{'func.func' op unknown trellis attribute 'trellis.partition'}}
func.func @misspelled_partitioned() attributes {trellis.partition} {
  return
}

// -----

// Tests that a layout is one sharding of an op's one result.
trellis.mesh @mesh = <["tp"=2]>
func.func @bad_layout(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'graph.exp' op expected 'trellis.layout' to hold the #trellis.sharding of the op's one result}}
  %0 = graph.exp %x {trellis.layout = [#trellis.sharding<@mesh, [{}]>]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that result shardings must be one #trellis.sharding per result.
trellis.mesh @mesh = <["dp"=2]>
func.func @result_shardings_count(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'graph.exp' op expected 'trellis.result_shardings' to hold 1 #trellis.sharding, one per result}}
  %0 = graph.exp %arg0 {trellis.result_shardings = []} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a result sharding is checked against the result's type.
trellis.mesh @mesh = <["dp"=2]>
func.func @result_sharding_mesh(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'graph.exp' op result sharding: unknown mesh @nowhere}}
  %0 = graph.exp %arg0 {trellis.result_shardings = [#trellis.sharding<@nowhere, [{}]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests that a step function's pipeline attributes are checked.
// expected-error @+1 {{'func.func' op expected 'trellis.pipeline_stages' to be an integer >= 1, found 0 : i64}}
func.func @no_stages() attributes {trellis.pipeline_stages = 0 : i64} {
  return
}

// -----

// Tests that a stage of no layers is refused.
// expected-error @+1 {{'func.func' op expected 'trellis.stage_layers' to be an array of layer counts >= 1, found array<i64: 2, 0>}}
func.func @empty_stage() attributes {trellis.stage_layers = array<i64: 2, 0>} {
  return
}

// -----

// Tests that an unknown schedule is refused, naming the known ones.
// expected-error @+1 {{'func.func' op expected 'trellis.pipeline_schedule' to name a schedule (gpipe, 1f1b, interleaved or zb-h1), found "round-robin"}}
func.func @unknown_schedule() attributes {trellis.pipeline_schedule = "round-robin"} {
  return
}

// -----

// Tests that a negative stage is refused.
// expected-error @+1 {{'func.func' op expected 'trellis.pipeline_stage' to be an integer >= 0, found -1 : i64}}
func.func @negative_stage() attributes {trellis.pipeline_stage = -1 : i64} {
  return
}

// -----

// Tests that a program is named by a string.
// expected-error @+1 {{'func.func' op expected 'trellis.program' to be a name, found 3 : i64}}
func.func @program_number() attributes {trellis.program = 3 : i64} {
  return
}

// -----

// Tests that a schedule lists action names.
// expected-error @+1 {{'func.func' op expected 'trellis.schedule' to be an array of action names, found [1]}}
func.func @schedule_numbers() attributes {trellis.schedule = [1]} {
  return
}

// -----

// Tests that the argument and result attributes of stage programs are checked.
// expected-error @+1 {{'func.func' op 'trellis.held' is a unit attribute of arguments}}
func.func @held_value(%arg0: tensor<8xf32> {trellis.held = 1 : i64}) {
  return
}

// -----

// Tests that sequence chunks need a sequence dimension.
// expected-error @+1 {{'func.func' op expected 'trellis.sequence_chunks' to be an integer >= 2 on an argument of rank >= 2 (dimension 1 the sequence), found 2 : i64 on 'tensor<8xi32>'}}
func.func @chunks_of_a_vector(%arg0: tensor<8xi32> {trellis.sequence_chunks = 2 : i64}) {
  return
}

// -----

// Tests that a result index is not negative.
// expected-error @+1 {{'func.func' op expected 'trellis.result' to be an integer >= 0, found -2 : i64}}
func.func @negative_result(%arg0: tensor<8xf32>) -> (tensor<8xf32> {trellis.result = -2 : i64}) {
  return %arg0 : tensor<8xf32>
}
