"""JAX jit's training step on a Trellis model config, for side-by-side
figures: GPT-2 as Hugging Face's GPT2LMHeadModel computes it (learned
positions, pre-norm blocks, gelu_new, causal attention, a final norm and
the head tied to the token table, no dropout), written out in jax.numpy,
with optax AdamW; the whole step (forward, backward, update) is one
jax.jit. Random tokens; fp32, or bf16 mixed precision as torch.autocast
does it: fp32 parameters, matmuls on bf16 copies, norms, softmax and the
loss in fp32. Prints the mean step time (the first step, which compiles,
left out). Needs jax and optax (a venv: never a test dependency).

Usage: jax_step.py CONFIG BATCH SEQ STEPS THREADS fp32|bf16

XLA's CPU client sizes its thread pool from the cores it may run on: run
it under `taskset` with THREADS cores (benchmarks/mixed_precision.sh
does); with THREADS 1 its multi-threaded Eigen kernels are also turned
off.
"""
import json
import os
import sys
import time

config_path, batch, seq, steps, threads, precision = sys.argv[1:7]
batch, seq, steps, threads = int(batch), int(seq), int(steps), int(threads)
if threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1")

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

config = json.load(open(config_path))
layers, heads = config["n_layer"], config["n_head"]
width, vocab = config["n_embd"], config["vocab_size"]
positions = config["n_positions"]
epsilon = config.get("layer_norm_epsilon", 1e-5)
init_range = config.get("initializer_range", 0.02)
compute = jnp.bfloat16 if precision == "bf16" else jnp.float32


def init(key):
    keys = iter(jax.random.split(key, 2 + 4 * layers))

    def normal(shape):
        return init_range * jax.random.normal(next(keys), shape, jnp.float32)

    def norm():
        return {"g": jnp.ones(width), "b": jnp.zeros(width)}

    def dense(inputs, outputs):
        return {"w": normal((inputs, outputs)), "b": jnp.zeros(outputs)}

    blocks = [{"ln1": norm(), "attn": dense(width, 3 * width),
               "proj": dense(width, width), "ln2": norm(),
               "fc": dense(width, 4 * width), "out": dense(4 * width, width)}
              for _ in range(layers)]
    return {"wte": normal((vocab, width)), "wpe": normal((positions, width)),
            "blocks": blocks, "ln_f": norm()}


def layer_norm(x, p):
    x = x.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + epsilon) * p["g"] + p["b"]
    return y.astype(compute)


def linear(x, p):
    return x.astype(compute) @ p["w"].astype(compute) + p["b"].astype(compute)


def attention(x, p):
    b, s, _ = x.shape
    qkv = linear(x, p["attn"]).reshape(b, s, 3, heads, width // heads)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    scores = (q @ k.transpose(0, 1, 3, 2)).astype(jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(width // heads))
    causal = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(compute)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, width)
    return linear(out, p["proj"])


def loss_fn(params, inputs, targets):
    x = params["wte"][inputs] + params["wpe"][: inputs.shape[1]]
    x = x.astype(compute)
    for block in params["blocks"]:
        x = x + attention(layer_norm(x, block["ln1"]), block)
        hidden = jax.nn.gelu(linear(layer_norm(x, block["ln2"]), block["fc"]),
                             approximate=True)
        x = x + linear(hidden, block["out"])
    x = layer_norm(x, params["ln_f"])
    logits = (x @ params["wte"].astype(compute).T).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, targets).mean()


optimizer = optax.adamw(1e-3, weight_decay=0.0)


@jax.jit
def step(params, state, inputs, targets):
    loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets)
    updates, state = optimizer.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


params = init(jax.random.PRNGKey(0))
state = optimizer.init(params)
tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, seq + 1), 0, vocab)
inputs, targets = tokens[:, :-1], tokens[:, 1:]

times = []
for _ in range(steps):
    start = time.perf_counter()
    params, state, loss = step(params, state, inputs, targets)
    loss.block_until_ready()
    times.append(time.perf_counter() - start)
mean = sum(times[1:]) / max(len(times) - 1, 1)
print(f"jax {jax.__version__} jit {precision} threads {threads} | "
      f"mean step {mean * 1e3:.2f} ms")
