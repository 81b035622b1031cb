#!/usr/bin/env python3
"""ruptures' PELT with the RBF cost, the reference of viss's src/media/pelt.rs.

`viss bench pelt` writes each signal as raw little-endian float32 (frames x dim, row major),
runs this script on them, and compares breakpoints and times with its own PELT on the same
bytes. Each case is timed around `rpt.Pelt(model="rbf", min_size, jump).fit(x).predict(pen)`
(Gram matrix, median heuristic and search: all of it), as the median over the repeats after
one warm-up run.

Usage:
    python3 benches/pelt_reference.py CASES.json OUTPUT.json

CASES.json: {"repeat": R, "cases": [{"file": "x.f32", "frames": n, "dim": d,
             "penalty": p, "min_size": m, "jump": j}, ...]}
OUTPUT.json: {"ruptures": "1.1.10", "cases": [{"breakpoints": [...], "seconds": s}, ...]}

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
    results = []
    for case in spec["cases"]:
        signal = np.fromfile(case["file"], dtype="<f4").reshape(case["frames"], case["dim"])

        def run():
            algo = rpt.Pelt(model="rbf", min_size=case["min_size"], jump=case["jump"])
            return algo.fit(signal).predict(pen=case["penalty"])

        breakpoints = run()
        times = []
        for _ in range(spec["repeat"]):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        results.append({"breakpoints": [int(b) for b in breakpoints], "seconds": statistics.median(times)})
    json.dump({"ruptures": rpt.__version__, "cases": results}, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
