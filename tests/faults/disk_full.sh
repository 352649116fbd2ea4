# The results disk fills up (a small tmpfs, mounted by the test as root): cells fail
# with a clear error, no partial result file is left, and the sweep completes after
# space is freed. A read-only results directory is refused up front.
source "$(dirname "$0")/../integration/lib.bash"
mkdir -p mnt
if ! mount -t tmpfs -o size=600k tmpfs mnt 2>/dev/null; then echo "SKIPPED: cannot mount a tmpfs here"; exit 77; fi
trap 'umount -l "$WORK/mnt" 2>/dev/null; rm -rf "$WORK"' EXIT
cat > grid.json <<'JSON'
{"name": "disk-full", "axes": {"task": ["norm_probe"], "activation": ["softmax", "relu"], "prompt_length": [16, 32, 64],
 "seed": [0, 1, 2, 3, 4, 5, 6, 7]}, "fixed": {"samples": 2000}, "resources": {"retries": 1}}
JSON
run_rc "$ATTNSWEEP" run grid.json --out mnt/out --workers 2 --backoff-s 0.05
echo "$ERR" | tail -4
check "a full disk fails cells (exit 1, got $RC)" test "$RC" = 1
check "the failure says why" grep -q "No space left on device" mnt/out/logs/*.log
check "no partial or temporary result file is left" test -z "$(ls mnt/out/runs | grep -v '\.h5$' || true)"
check "every result file written is valid" $PY - mnt/out <<'PY'
import glob, sys, h5py
for f in glob.glob(sys.argv[1] + "/runs/*.h5"):
    with h5py.File(f) as h:
        assert h.attrs["status"] == "complete", f
PY
done1=$(ls mnt/out/runs/*.h5 2>/dev/null | wc -l)
echo "$done1 of 48 cells fit on the full disk"
mount -o remount,size=64m mnt
run_rc "$ATTNSWEEP" run grid.json --out mnt/out --workers 2
check "after space is freed the sweep completes (exit $RC)" test "$RC" = 0
check "48 result files" test "$(ls mnt/out/runs/*.h5 | wc -l)" = 48
check "only the missing cells ran" test "$(count_events mnt/out started)" = $((48 - done1))

umount mnt
mount -t tmpfs -o ro,size=1m tmpfs mnt
run_rc "$ATTNSWEEP" run grid.json --out mnt/out --workers 2
check "a read-only results directory exits 2 (got $RC)" test "$RC" = 2
check "with a clear message ($ERR)" grep -q "mnt/out: cannot create directory (Read-only file system)" <<<"$ERR"
