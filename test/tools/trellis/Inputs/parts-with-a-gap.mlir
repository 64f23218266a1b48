// A hand-written forward whose layers skip a number: layer 1 is missing.
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 2>} : tensor<4xf32>
  %c = graph.neg %b {graph.part = #graph.part<layer 3>} : tensor<4xf32>
  return %c : tensor<4xf32>
}
