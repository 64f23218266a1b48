// A hand-written forward: its ops carry file locations, not the importer's
// part names, so it cannot be split into pipeline stages.
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = graph.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
