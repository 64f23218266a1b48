// RUN: trellis-opt %s -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings,trellis-print-sharded-cost))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=GATHER
// RUN: trellis-opt %s -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings,trellis-print-sharded-cost{ring-attention=1}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=RING
// RUN: trellis-opt %s -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings,trellis-partition,trellis-lower-ring-attention,trellis-print-op-costs))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOWERED

// Tests that attention over a sequence split in two is priced in the
// all-gather form (keys and values gathered: 128 bytes each; the queries'
// half against all 8 keys, 1024 flops), or with ring-attention as its ring:
// the keys and values passed on once (collective_permute), two blocks of
// 512 flops and one merge (6 flops for each of its 32 + 8 result elements),
// as the partitioned and lowered function's op costs add up.
trellis.mesh @mesh = <["cp"=2]>
// GATHER: remark: per rank: 1024 flops, {{.*}}; all_gather over cp: 3 calls, 384 bytes, 384 sent
// RING: remark: per rank: 1264 flops, {{.*}}; all_gather over cp: 1 calls, 128 bytes, 128 sent; collective_permute over cp: 2 calls, 256 bytes, 256 sent
// LOWERED: remark: total cost: 1264 flops, 1088 bytes read, 480 bytes written
func.func @attention(
    %q: tensor<1x8x2x4xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"cp"}, {}, {}]>},
    %k: tensor<1x8x2x4xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"cp"}, {}, {}]>},
    %v: tensor<1x8x2x4xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"cp"}, {}, {}]>}) -> tensor<1x8x2x4xf32> {
  %0 = graph.attention %q, %k, %v scale 0.5 {causal = true} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>
  return %0 : tensor<1x8x2x4xf32>
}
