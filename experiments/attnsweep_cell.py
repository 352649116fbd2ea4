"""attnsweep's side of a command cell, for the program it runs (docs/own-code.md).

Pure standard library. attnsweep writes this file into the cell's scratch directory and
puts that on the program's PYTHONPATH, so `import attnsweep_cell` works with nothing
installed. Importing it under attnsweep sets a flag on SIGTERM and SIGUSR1 instead of
dying: the program polls stop_requested(), saves its checkpoint and calls
exit_interrupted() (exit code 75), and the cell resumes from the checkpoint after the
requeue.

    import attnsweep_cell as cell
    cfg = cell.config()                        # the cell's effective config (a dict)
    start = 0
    if cell.has_checkpoint():
        start = load(cell.checkpoint_path())   # the program's own format
    for step in range(start, cfg["steps"]):
        ...
        cell.log(step, loss=loss, accuracy=acc)
        if cell.stop_requested():
            cell.save_checkpoint(lambda path: save(path, step + 1))
            cell.exit_interrupted()
    cell.final(test_loss=tl, test_accuracy=ta)
"""
import json
import os
import signal
import sys

EXIT_INTERRUPTED = 75  # attnsweep's "interrupted, resumable"

_stop = {"signal": None}


def _on_signal(signum, _frame):
    _stop["signal"] = signum


def install_signal_handlers():
    """SIGTERM and SIGUSR1 set the flag stop_requested() reads (done on import under attnsweep)."""
    for s in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(s, _on_signal)


def _env(name):
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(f"attnsweep_cell: ${name} is not set: run this program as a cell of attnsweep's "
                           "command task (docs/own-code.md)")
    return value


def config():
    """The cell's effective config: its declared keys, seed, task, ..."""
    with open(_env("ATTNSWEEP_CONFIG"), encoding="utf-8") as f:
        return json.load(f)


def checkpoint_path():
    """Where the program keeps its checkpoint: it survives a requeue and is removed once the result is written."""
    return _env("ATTNSWEEP_CHECKPOINT")


def has_checkpoint():
    return os.path.exists(checkpoint_path())


def save_checkpoint(save):
    """Calls save(path) on a temporary path, then renames it over the checkpoint: never half a checkpoint."""
    final_path = checkpoint_path()
    tmp = final_path + ".tmp"
    save(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final_path)


def scratch_dir():
    """A directory of this attempt's own, removed when the attempt ends."""
    return _env("ATTNSWEEP_SCRATCH")


def stop_requested():
    """True once SIGTERM or SIGUSR1 arrived: save the checkpoint and call exit_interrupted()."""
    return _stop["signal"] is not None


def exit_interrupted():
    """Exit 75: attnsweep reruns the cell after the requeue, and the program resumes from its checkpoint."""
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(EXIT_INTERRUPTED)


def _append(record):
    line = json.dumps(record, allow_nan=False, separators=(",", ":"))
    with open(_env("ATTNSWEEP_METRICS"), "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _number(name, value):
    value = float(value)
    return None if value != value or value in (float("inf"), float("-inf")) else value  # NaN/Inf: null


def log(step, **metrics):
    """One logging step: {"step": 100, "loss": 0.51, ...}; they become /train/step and /train/<name>."""
    record = {"step": int(step)}
    record.update({k: _number(k, v) for k, v in metrics.items()})
    _append(record)


def final(**metrics):
    """The final record: the /final attributes and summary.csv columns (test_loss, test_accuracy, ...)."""
    _append({"final": {k: _number(k, v) for k, v in metrics.items()}})


if "ATTNSWEEP_METRICS" in os.environ:
    install_signal_handlers()
