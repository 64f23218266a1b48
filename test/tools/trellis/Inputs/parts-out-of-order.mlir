// A hand-written forward whose parts are not in model order: an op of
// layer 0 follows one of layer 1.
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.neg %x {graph.part = #graph.part<embedding>} : tensor<4xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 1>} : tensor<4xf32>
  %c = graph.neg %b {graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %d = graph.neg %c {graph.part = #graph.part<head>} : tensor<4xf32>
  return %d : tensor<4xf32>
}
