#!/usr/bin/env python3
"""ruptures' PELT with the RBF cost, the reference of viss's crates/pelt (the viss-pelt crate).

`viss bench pelt` writes each signal as raw little-endian float32 (frames x dim, row major),
starts this script once, and then asks it for one case at a time, timing its own PELT on the
same bytes just before or just after (this machine's speed drifts within seconds, so the two
times of a pair are taken together). Each case is timed around
`rpt.Pelt(model="rbf", min_size, jump).fit(x).predict(pen)` (Gram matrix, median heuristic and
search: all of it), as the median of at least `repeat` runs that together last at least
`measure_seconds`, after running it untimed for at least `warm_up_seconds`. Both sides do the
same: this VM runs slower for a while after an idle spell, and its speed drifts, so each side's
median covers a similar stretch of time.

Usage:
    python3 src/bench/reference/pelt_reference.py CASES.json

CASES.json: {"repeat": R, "warm_up_seconds": W, "measure_seconds": M, "cases": [{"file": "x.f32", "frames": n, "dim": d,
             "penalty": p, "min_size": m, "jump": j}, ...]}
Protocol: once numpy and ruptures are imported, one line {"ruptures": "1.1.10"} on stdout; then
for each case index read from stdin (one per line), one line {"breakpoints": [...], "seconds": s}.
Exits at the end of stdin.

Needs: pip install numpy ruptures
"""

import json
import statistics
import sys
import time

import numpy as np
import ruptures as rpt


def main():
    spec = json.load(open(sys.argv[1]))
    signals = [
        np.fromfile(case["file"], dtype="<f4").reshape(case["frames"], case["dim"])
        for case in spec["cases"]
    ]
    print(json.dumps({"ruptures": rpt.__version__}), flush=True)
    for line in sys.stdin:
        index = int(line)
        case, signal = spec["cases"][index], signals[index]

        def run():
            algo = rpt.Pelt(model="rbf", min_size=case["min_size"], jump=case["jump"])
            return algo.fit(signal).predict(pen=case["penalty"])

        warm_up_started = time.perf_counter()
        run()
        while time.perf_counter() - warm_up_started < spec["warm_up_seconds"]:
            run()
        times = []
        while len(times) < spec["repeat"] or sum(times) < spec["measure_seconds"]:
            started = time.perf_counter()
            breakpoints = run()
            times.append(time.perf_counter() - started)
        result = {"breakpoints": [int(b) for b in breakpoints], "seconds": statistics.median(times)}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
