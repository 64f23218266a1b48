func.func @other(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = graph.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
