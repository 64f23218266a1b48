// RUN: trellis-opt %s -trellis-print-op-costs -o /dev/null 2>&1 | FileCheck %s

// Tests that a matmul costs 2 M N K flops, data movement none, and that the
// function's total is their sum.
func.func @costs(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %q: tensor<2x8x4x16xf32>) {
  // CHECK: 7:8: remark: cost: 8192 flops, 2560 bytes read, 1024 bytes written
  %0 = graph.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32>
  // CHECK: 9:8: remark: cost: 0 flops, 1024 bytes read, 1024 bytes written
  %1 = graph.reshape %0 to [16, 16] : tensor<8x32xf32>
  // CHECK: 11:8: remark: cost: 32768 flops, 12288 bytes read, 4096 bytes written
  %2 = graph.attention %q, %q, %q scale 0.25 : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return
}
// CHECK: 5:1: remark: total cost: 40960 flops, 15872 bytes read, 6144 bytes written
