// The model of lookup-lm.mlir partitioned by hand over dp=2: each rank
// takes 2 of the 4 rows of the batch; the loss and the table's gradient
// are partial sums (the normalizer keeps the global 32 positions) that an
// all_reduce completes.
trellis.mesh @mesh = <["dp"=2]>
func.func @train_step(
    %table: tensor<16x16xf32> {graph.role = "param", graph.param = "table", graph.init = "normal:0.5"},
    %tokens: tensor<2x8xi32> {graph.role = "input", graph.param = "tokens", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>},
    %targets: tensor<2x8xi32> {graph.role = "input", graph.param = "targets", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<f32>, tensor<16x16xf32> {graph.updates = 0 : i64}) attributes {trellis.partitioned} {
  %logits = graph.embedding %table, %tokens : tensor<16x16xf32>, tensor<2x8xi32>
  %partial = graph.cross_entropy %logits, %targets {normalizer = 32} : tensor<2x8x16xf32>, tensor<2x8xi32>
  %loss = trellis.all_reduce %partial over @mesh ["dp"] sum : tensor<f32>
  %one = graph.fill 1.0 shape []
  %dlogits = graph.cross_entropy_grad %logits, %targets, %one {normalizer = 32} : tensor<2x8x16xf32>, tensor<2x8xi32>
  %dpartial = graph.embedding_grad %tokens, %dlogits rows 16 : tensor<2x8xi32>, tensor<2x8x16xf32>
  %dtable = trellis.all_reduce %dpartial over @mesh ["dp"] sum : tensor<16x16xf32>
  %new = graph.sgd %table, %dtable {learning_rate = 0.5, weight_decay = 0.0} : tensor<16x16xf32>
  return %loss, %new : tensor<f32>, tensor<16x16xf32>
}
