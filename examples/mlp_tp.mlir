// A Megatron-style MLP block after partitioning over tp=4 (one program for
// every rank): the input is replicated, the first weight is split by columns
// and the second by rows, so the partial result needs one all_reduce.
trellis.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @mlp_block(
    %x: tensor<8x64xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>},
    %h: tensor<8x64xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}], partial<sum>={"tp"}>})
    -> (tensor<8x64xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}) {
  // %h is the local partial product of the row-split second weight.
  %sum = trellis.all_reduce %h over @mesh ["tp"] sum : tensor<8x64xf32>
  %out = arith.addf %x, %sum : tensor<8x64xf32>
  return %out : tensor<8x64xf32>
}
