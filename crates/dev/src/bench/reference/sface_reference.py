#!/usr/bin/env python3
"""Python reference of viss's SFace embedder (src/vision/sface.rs), on aligned crops.

`viss bench sface` aligns every face of an image in Rust, writes the 112x112
crops as PNG files, and runs this script on the same crops with the same
(converted) SFace graph and thread count, to compare the time per face and the
embeddings. It is written the way a straightforward Python implementation
would be: Pillow to read, numpy to lay out the input, onnxruntime to run.

Usage:
    python3 src/bench/reference/sface_reference.py OUTPUT.json --model sface.onnx \
        [--threads N] [--repeat R] CROP.png [CROP.png ...]

Needs: pip install numpy pillow onnxruntime==1.31.1

Per face (timed; reading the PNG is not): input = the crop's RGB values 0..255
as float32, NCHW (the graph normalises them itself); run; L2-normalise the
128 outputs. One warm-up pass over all crops is discarded; the time per face
is the median over `repeat` passes of every crop.

Output JSON
-----------
{"threads": 2, "repeat": 5, "seconds_per_face": 0.004,
 "embeddings": [[128 floats], ...]}           # in the order of the crops
"""

import argparse
import json
import statistics
import time

import numpy as np
import onnxruntime
from PIL import Image


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("crops", nargs="+")
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    crops = [np.asarray(Image.open(path).convert("RGB")) for path in args.crops]

    def embed(crop):
        blob = crop.astype(np.float32).transpose(2, 0, 1)[np.newaxis].copy()
        vector = session.run(None, {input_name: blob})[0].reshape(-1)
        return vector / np.linalg.norm(vector)

    times = []
    embeddings = []
    for attempt in range(args.repeat + 1):
        for crop in crops:
            started = time.perf_counter()
            vector = embed(crop)
            elapsed = time.perf_counter() - started
            if attempt > 0:
                times.append(elapsed)
            elif len(embeddings) < len(crops):
                embeddings.append(vector)
    with open(args.output, "w") as out:
        json.dump(
            {
                "threads": args.threads,
                "repeat": args.repeat,
                "seconds_per_face": statistics.median(times),
                "embeddings": [vector.tolist() for vector in embeddings],
            },
            out,
        )


if __name__ == "__main__":
    main()
