"""Checks `trellis plan --evaluate` against published step times.

Narayanan et al., SC'21, Table 1 (GPT on A100s, V = 51200, s = 2048, full
recomputation, fp16): for each row the measured TFLOP/s per GPU gives the
step time through the paper's own FLOP count,
    F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h)),
    step = F / (TFLOP/s x 10^12 x GPUs).
The row's configuration (t, p, d; no sequence parallelism, which came in
2022) is evaluated with the cluster file given; what the row leaves out
(micro-batch size, schedule, chunks) the planner chooses. Megatron-LM ran
these rows with every data-parallel rank holding the whole optimizer
(zero=0: its distributed optimizer came in 2022), before it fused
gradient accumulation into the weight-gradient GEMMs and before it
overlapped tensor-parallel communication with them (both came in late
2021): the plans evaluated do the same (zero=0,
fuse-gradient-accumulation=false, schedule-collectives=false). Prints one
line per row and exits 1 when a prediction is more than TOLERANCE off.

Korthikanti et al. 2022, Table 5 (the models and layouts of its Table 3:
t = 8, d = 1, V = 51200, s = 2048, fp16): each row's measured iteration
time twice, with full recomputation and tensor parallelism alone, and
with sequence parallelism and selective recomputation ("present work");
the micro-batch size is the paper's, the schedule the planner's. That
Megatron-LM (v3.0) fused gradient accumulation and overlapped the
backward's tensor-parallel communication with the GEMMs, as Trellis's
plans do by default.

Dubey et al. 2024 (The Llama 3 Herd of Models), Table 4: Llama 3 405B
pre-training on H100s (8192 tokens, 2048 sequences a step, bf16; tp 8, pp
16, cp 1, dp 64 or 128) at 430 and 400 TFLOP/s per GPU. These rows run on
the `h100-sxm` preset (CLUSTER is for the A100 tables), with
examples/configs/llama-3.1-405b.json and the interleaved schedule Meta
ran; the chunks and the recomputation are the planner's. The measured
step is the predicted plan's model FLOPs at the measured rate.

Usage: published_plans.py TRELLIS DIR CLUSTER TOLERANCE ROW [ROW...]
(rows by model size: 1.7b 3.6b 7.5b 18.4b 39.1b 76.1b 145.6b 310.1b
529.6b 1t from Narayanan et al.; k22b k175b k530b k1t from Korthikanti
et al.; l405b-8k l405b-16k from Dubey et al.)"""

import json
import os
import subprocess
import sys

# size: hidden, heads, layers, t, p, d, batch, measured TFLOP/s per GPU
ROWS = {
    "1.7b": (2304, 24, 24, 1, 1, 32, 512, 137),
    "3.6b": (3072, 32, 30, 2, 1, 32, 512, 138),
    "7.5b": (4096, 32, 36, 4, 1, 32, 512, 142),
    "18.4b": (6144, 48, 40, 8, 1, 32, 1024, 135),
    "39.1b": (8192, 64, 48, 8, 2, 32, 1536, 138),
    "76.1b": (10240, 80, 60, 8, 4, 32, 1792, 140),
    "145.6b": (12288, 96, 80, 8, 8, 24, 2304, 148),
    "310.1b": (16384, 128, 96, 8, 16, 15, 2160, 155),
    "529.6b": (20480, 128, 105, 8, 35, 9, 2520, 163),
    "1t": (25600, 160, 128, 8, 64, 6, 3072, 163),
}
# size: hidden, heads, layers, t, p, batch, micro-batch, measured seconds
# with full recomputation, with sequence parallelism and selective
# recomputation
KORTHIKANTI = {
    "k22b": (6144, 64, 48, 8, 1, 4, 4, 1.42, 1.10),
    "k175b": (12288, 96, 96, 8, 8, 64, 1, 18.13, 13.75),
    "k530b": (20480, 128, 105, 8, 35, 280, 1, 49.05, 37.83),
    "k1t": (25600, 160, 128, 8, 64, 512, 1, 94.42, 71.49),
}
# size: GPUs, tp, pp, dp, measured TFLOP/s per GPU
LLAMA3 = {
    "l405b-8k": (8192, 8, 16, 64, 430),
    "l405b-16k": (16384, 8, 16, 128, 400),
}
LLAMA3_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "..", "..", "examples", "configs",
                             "llama-3.1-405b.json")
VOCAB, SEQ = 51200, 2048


def write_config(directory, row, h, a, l):
    config = f"{directory}/gpt-{row}.json"
    with open(config, "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"],
                   "model_type": "gpt2", "n_embd": h, "n_head": a,
                   "n_layer": l, "n_positions": SEQ,
                   "vocab_size": VOCAB, "n_inner": 4 * h}, f)
    return config


def predict(trellis, config, cluster, gpus, batch, plan, out, seq=SEQ,
            precision="fp16"):
    """The plan's prediction; where Trellis's own memory plan for it does
    not fit the device (the paper's run did), the time of the closest,
    noted."""
    run = subprocess.run(
        [trellis, "plan", config, "--cluster", cluster, "--gpus", str(gpus),
         "--global-batch", str(batch), "--seq", str(seq), "--precision",
         precision, "--evaluate", plan, "--json", out],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with open(out) as f:
            result = json.load(f)
    except OSError:
        sys.exit(run.stderr)
    if result["plans"]:
        return result["plans"][0]
    closest = result["closest"]
    closest["plan"] += (f" (Trellis's memory plan does not fit: "
                        f"{closest['binding_term']})")
    return closest


def korthikanti(trellis, directory, cluster, row):
    """(label, measured, plan) for both of the row's runs."""
    h, a, l, t, p, batch, micro, full, selective = KORTHIKANTI[row]
    config = write_config(directory, row, h, a, l)
    runs = []
    for label, measured, settings in (
            ("full", full, "no-sp,recompute=full"),
            ("selective", selective, "sp,recompute=selective")):
        plan = predict(trellis, config, cluster, t * p, batch,
                       f"tp={t},pp={p},dp=1,micro-batch={micro},{settings}",
                       f"{directory}/gpt-{row}-{label}.plans.json")
        runs.append((f"{row} {label}: t={t} p={p}", measured, plan))
    return runs


def narayanan(trellis, directory, cluster, row):
    """(label, measured, plan) of the row."""
    h, a, l, t, p, d, batch, tflops = ROWS[row]
    config = write_config(directory, row, h, a, l)
    flops = 96 * batch * SEQ * l * h * h * (
        1 + SEQ / (6 * h) + VOCAB / (16 * l * h))
    measured = flops / (tflops * 1e12 * t * p * d)
    plan = predict(trellis, config, cluster, t * p * d, batch,
                   f"tp={t},pp={p},dp={d},no-sp,recompute=full,zero=0,"
                   "fuse-gradient-accumulation=false,"
                   "schedule-collectives=false",
                   f"{directory}/gpt-{row}.plans.json")
    return [(f"{row}: t={t} p={p} d={d}", measured, plan)]


def llama3(trellis, directory, cluster, row):
    """(label, measured, plan) of the row."""
    gpus, t, p, d, tflops = LLAMA3[row]
    plan = predict(trellis, LLAMA3_CONFIG, "h100-sxm", gpus, 2048,
                   f"tp={t},pp={p},dp={d},cp=1,sp,schedule=interleaved,"
                   "micro-batch=1", f"{directory}/{row}.plans.json",
                   seq=8192, precision="bf16")
    flops = plan["model_tflops_per_gpu"] * 1e12 * gpus * plan["step_time_s"]
    measured = flops / (tflops * 1e12 * gpus)
    return [(f"{row}: t={t} p={p} d={d}", measured, plan)]


def main(trellis, directory, cluster, tolerance, rows):
    worst = 0.0
    for row in rows:
        table = (korthikanti if row in KORTHIKANTI else
                 llama3 if row in LLAMA3 else narayanan)
        for label, measured, plan in table(trellis, directory, cluster, row):
            predicted = plan["step_time_s"]
            error = (predicted - measured) / measured
            worst = max(worst, abs(error))
            print(f"{label} measured {measured:.2f} s, predicted "
                  f"{predicted:.2f} s ({100 * error:+.1f}%) as {plan['plan']}")
    print(f"worst {100 * worst:.1f}% "
          f"({'within' if worst <= tolerance else 'beyond'} "
          f"{100 * tolerance:.0f}%)")
    if worst > tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]),
         sys.argv[5:])
