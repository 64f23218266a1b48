"""Checks `trellis plan --evaluate` against published step times.

Narayanan et al., SC'21, Table 1 (GPT on A100s, V = 51200, s = 2048, full
recomputation, fp16): for each row the measured TFLOP/s per GPU gives the
step time through the paper's own FLOP count,
    F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h)),
    step = F / (TFLOP/s x 10^12 x GPUs).
The row's configuration (t, p, d; no sequence parallelism, which came in
2022) is evaluated with the cluster file given; what the row leaves out
(micro-batch size, schedule, chunks) the planner chooses. Prints one line
per row and exits 1 when a prediction is more than TOLERANCE off.
Usage: published_plans.py TRELLIS DIR CLUSTER TOLERANCE ROW [ROW...]
(rows by model size: 1.7b 3.6b 7.5b 18.4b 39.1b 76.1b 145.6b 310.1b
529.6b 1t)"""

import json
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
VOCAB, SEQ = 51200, 2048


def main(trellis, directory, cluster, tolerance, rows):
    worst = 0.0
    for row in rows:
        h, a, l, t, p, d, batch, tflops = ROWS[row]
        config = f"{directory}/gpt-{row}.json"
        with open(config, "w") as f:
            json.dump({"architectures": ["GPT2LMHeadModel"],
                       "model_type": "gpt2", "n_embd": h, "n_head": a,
                       "n_layer": l, "n_positions": SEQ,
                       "vocab_size": VOCAB, "n_inner": 4 * h}, f)
        flops = 96 * batch * SEQ * l * h * h * (
            1 + SEQ / (6 * h) + VOCAB / (16 * l * h))
        measured = flops / (tflops * 1e12 * t * p * d)
        out = f"{directory}/gpt-{row}.plans.json"
        subprocess.run(
            [trellis, "plan", config, "--cluster", cluster, "--gpus",
             str(t * p * d), "--global-batch", str(batch), "--seq", str(SEQ),
             "--precision", "fp16", "--evaluate",
             f"tp={t},pp={p},dp={d},no-sp,recompute=full", "--json", out],
            check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            plan = json.load(f)["plans"][0]
        predicted = plan["step_time_s"]
        error = (predicted - measured) / measured
        worst = max(worst, abs(error))
        print(f"{row}: t={t} p={p} d={d} measured {measured:.2f} s, "
              f"predicted {predicted:.2f} s ({100 * error:+.1f}%) "
              f"as {plan['plan']}")
    print(f"worst {100 * worst:.1f}% "
          f"({'within' if worst <= tolerance else 'beyond'} "
          f"{100 * tolerance:.0f}%)")
    if worst > tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]),
         sys.argv[5:])
