// A hand-written forward that declares no model parts (graph.part), so it
// cannot be split into pipeline stages.
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = graph.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
