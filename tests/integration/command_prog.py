"""A stand-in for a user's program, for the command task's tests (command_task.sh,
command_failures.sh): its `mode` key picks how it behaves. Standard library only, and
attnsweep_cell is found on the PYTHONPATH attnsweep sets.

usage: command_prog.py MODE [ARG ...]   (the grid passes "{mode}", "{lr}", "{name}", ...)
"""
import json
import os
import signal
import sys
import time

import attnsweep_cell as cell

mode = sys.argv[1]
cfg = cell.config()
# What reached the program, for the test to compare with the cell's values.
with open(os.path.join(os.environ["OUT_DIR"], f"seen-{cfg['seed']}-{mode}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("ATTNSWEEP_")},
               "scratch_exists": os.path.isdir(cell.scratch_dir()), "config": cfg}, f)

steps = int(cfg.get("steps", 5))
if mode == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "hang":
    while True:
        time.sleep(1)
if mode == "malformed":
    cell.log(0, loss=1.0)
    with open(os.environ["ATTNSWEEP_METRICS"], "a") as f:
        f.write('{"step": 1, "loss": 0.5\n')
    cell.final(test_loss=0.5)
    sys.exit(0)
if mode == "badname":
    # W&B's val-loss spelling at step 0, then a long "training" (until fixed: a marker file).
    if not os.path.exists(os.path.join(os.environ["OUT_DIR"], "fixed")):
        with open(os.environ["ATTNSWEEP_METRICS"], "a") as f:
            f.write('{"step": 0, "val-loss": 1.0}\n')
        time.sleep(120)
    cell.log(0, loss=1.0)
    cell.final(test_loss=0.5)
    sys.exit(0)
if mode == "outputs":
    # What a W&B / Hydra user expects: an output folder that is kept, the cell's id, its
    # keys as --key=value ({args}), metric names with /, and json.dumps' NaN.
    out = os.environ["ATTNSWEEP_OUTPUT_DIR"]
    with open(os.path.join(out, "weights.txt"), "w") as f:
        f.write(os.environ["ATTNSWEEP_CELL_ID"] + " " + " ".join(sys.argv[2:]) + "\n")
    with open(os.environ["ATTNSWEEP_METRICS"], "a") as f:
        f.write(json.dumps({"step": 0, "train/loss": 1.0, "val/loss": float("nan")}) + "\n")
        f.write(json.dumps({"final": {"test/accuracy": 0.75, "test/loss": float("nan")}}) + "\n")
    sys.exit(0)
if mode == "exit75":
    sys.exit(75)  # EX_TEMPFAIL of its own, no signal: a failed attempt, not an interruption
if mode == "nofinal":
    for s in range(steps):
        cell.log(s, loss=1.0 / (s + 1))
    sys.exit(0)
if mode == "ignore_term":
    # Ignores the signal while "training"; a marker file says it got that far.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if not os.path.exists(os.path.join(os.environ["OUT_DIR"], "behave")):
        open(os.path.join(os.environ["OUT_DIR"], "ignoring"), "w").close()
        while True:
            time.sleep(0.1)
    mode = "ok"

# ok and slow: a deterministic "training" with a checkpoint of the step reached.
lr = float(cfg["lr"])
start, w = 0, 1.0
if cell.has_checkpoint():
    with open(cell.checkpoint_path()) as f:
        start, w = json.load(f)
for s in range(start, steps):
    w = w - lr * w  # gradient step on w^2/2
    cell.log(s, loss=0.5 * w * w, accuracy=1.0 - w)
    if mode == "slow":
        open(os.path.join(os.environ["OUT_DIR"], f"step-{cfg['seed']}"), "w").close()
        time.sleep(0.2)
    if cell.stop_requested():
        def save(path, state=(s + 1, w)):
            with open(path, "w") as f:
                json.dump(state, f)
        cell.save_checkpoint(save)
        cell.exit_interrupted()
cell.final(test_loss=0.5 * w * w, test_accuracy=1.0 - w, w=w)
