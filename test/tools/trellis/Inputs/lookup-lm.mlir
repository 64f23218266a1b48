// A bigram language model trained with SGD, written as a training step for
// one device: logits are rows of a table picked by the current token.
func.func @train_step(
    %table: tensor<16x16xf32> {graph.role = "param", graph.param = "table", graph.init = "normal:0.5"},
    %tokens: tensor<4x8xi32> {graph.role = "input", graph.param = "tokens"},
    %targets: tensor<4x8xi32> {graph.role = "input", graph.param = "targets"})
    -> (tensor<f32>, tensor<16x16xf32> {graph.updates = 0 : i64}) {
  %logits = graph.embedding %table, %tokens : tensor<16x16xf32>, tensor<4x8xi32>
  %loss = graph.cross_entropy %logits, %targets : tensor<4x8x16xf32>, tensor<4x8xi32>
  %one = graph.fill 1.0 shape []
  %dlogits = graph.cross_entropy_grad %logits, %targets, %one : tensor<4x8x16xf32>, tensor<4x8xi32>
  %dtable = graph.embedding_grad %tokens, %dlogits rows 16 : tensor<4x8xi32>, tensor<4x8x16xf32>
  %new = graph.sgd %table, %dtable {learning_rate = 0.5, weight_decay = 0.0} : tensor<16x16xf32>
  return %loss, %new : tensor<f32>, tensor<16x16xf32>
}
