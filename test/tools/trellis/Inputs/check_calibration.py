"""Prints what a `trellis calibrate` cluster file holds, for FileCheck."""

import json
import sys

with open(sys.argv[1]) as f:
    cluster = json.load(f)
device = cluster["device"]
print("name:", cluster["name"])
print("devices_per_node:", cluster["devices_per_node"])
values = {
    "memory_bytes": device["memory_bytes"],
    "memory_bandwidth": device["memory_bandwidth"],
    "peak_flops.f32": device["peak_flops"]["f32"],
    "kernel_overhead_s": device["kernel_overhead_s"],
    "intra_node.bandwidth": cluster["intra_node"]["bandwidth"],
}
print("positive:", " ".join(k for k, v in values.items() if v > 0))
record = cluster["calibration"]
print("gemm points:", len(record["kernels"]["gemm"]["f32"]["points_m_k_n_flops"]))
ops = device["op_efficiency"]
expected = ["add", "attention", "attention_grad", "cross_entropy",
            "embedding_grad", "gelu_tanh", "layer_norm", "rms_norm", "rope",
            "silu", "unary_grad", "adamw"]
print("op_efficiency has:", " ".join(op for op in expected if ops.get(op, 0) > 0))
print("op_efficiency lacks:", "matmul" if "matmul" not in ops else "")
if cluster["devices_per_node"] > 1:
    kinds = sorted({p["kind"] for p in record["links"]["points"]})
    print("link points:", " ".join(kinds))
    rates = cluster["intra_node"]["relative_rate"]
    print("relative rates:", " ".join(k for k in sorted(rates) if rates[k] > 0))
    overlap = device["communication_overlap"]
    print("communication overlap within [0, 1]:", 0 <= overlap <= 1)
