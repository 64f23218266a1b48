"""cuBLAS's and PyTorch SDPA's rates on a GPU, on the shapes of the steps
scripts/gpu-check.sh times, for the kernel-level comparison beside Trellis's
profiled rates (flops_by_op over the profiled time).

Usage: pytorch_kernels.py

Prints, per shape, the TFLOP/s of torch.matmul in bf16 (cuBLAS; the
products of GPT-2 124M at 16 x 1024 tokens and of Llama-3.2-1B at 4 x 2048,
forward shapes) and of scaled_dot_product_attention's forward and
forward+backward (causal, bf16; flash or cuDNN, as PyTorch picks), timed
with CUDA events over 20 runs after 5. Needs torch with CUDA (never a test
dependency).
"""
import torch

torch.backends.cuda.matmul.allow_tf32 = False


def timed(run, repeats=20, warmup=5):
    for _ in range(warmup):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
        enable_timing=True)
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def matmul_rate(m, k, n):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return 2 * m * k * n / timed(lambda: a @ b) / 1e12


def attention_rates(batch, seq, heads, kv_heads, dim):
    q = torch.randn(batch, heads, seq, dim, device="cuda",
                    dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, dim, device="cuda",
                    dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    attend = torch.nn.functional.scaled_dot_product_attention
    grouped = heads != kv_heads

    def forward():
        return attend(q, k, v, is_causal=True, enable_gqa=grouped)

    out = forward()
    grad = torch.randn_like(out)

    def both():
        q.grad = k.grad = v.grad = None
        forward().backward(grad)

    # Causal: half the score matrix; the backward is 2.5 forwards.
    flops = 4 * batch * heads * seq * seq * dim / 2
    with torch.no_grad():
        forward_time = timed(forward)
    return flops / forward_time / 1e12, 3.5 * flops / timed(both) / 1e12


print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
for name, (m, k, n) in {
        "gpt2 qkv 16384x768x2304": (16384, 768, 2304),
        "gpt2 mlp_up 16384x768x3072": (16384, 768, 3072),
        "gpt2 head 16384x768x50257": (16384, 768, 50257),
        "llama qkv 8192x2048x3072": (8192, 2048, 3072),
        "llama mlp_up 8192x2048x8192": (8192, 2048, 8192),
        "llama mlp_down 8192x8192x2048": (8192, 8192, 2048),
        "llama head 8192x2048x128256": (8192, 2048, 128256)}.items():
    print(f"cublas matmul {name}: {matmul_rate(m, k, n):.1f} TFLOP/s")
for name, shape in {"gpt2 b16 s1024 h12 d64": (16, 1024, 12, 12, 64),
                    "llama b4 s2048 h32/8 d64": (4, 2048, 32, 8, 64)}.items():
    forward, both = attention_rates(*shape)
    print(f"sdpa {name}: forward {forward:.1f} TFLOP/s, "
          f"forward+backward {both:.1f} TFLOP/s")
