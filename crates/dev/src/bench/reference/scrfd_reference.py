#!/usr/bin/env python3
"""Python reference of viss's SCRFD face detector (src/vision/scrfd.rs).

`viss bench scrfd` runs this next to the Rust detector on the same images and
compares the faces found and the time per image. It is written the way a
straightforward Python implementation would be: Pillow to read and resize,
numpy for normalisation and anchor decoding, onnxruntime for the graph, and
greedy NMS with numpy IoU over the remaining boxes.

Usage:
    python3 src/bench/reference/scrfd_reference.py OUTPUT.json --model scrfd.onnx \
        [--threads N] [--repeat R] IMAGE [IMAGE ...]

Needs: pip install numpy pillow onnxruntime==1.31.1

Pipeline (the same as the Rust side; see scrfd.rs for the reasoning):
  read the image as RGB; scale it to fit 640x640 keeping the aspect ratio
  (content size = round(side * min(640 / w, 640 / h)), half away from zero),
  Pillow BILINEAR (an antialiased triangle filter); paste it top-left on black;
  input = (value - 127.5) / 128, NCHW, RGB order; for strides 8, 16, 32, two
  anchors per grid cell centred on the cell's top-left corner (x * s, y * s);
  box = centre -/+ distances * s, landmarks = centre + offsets * s; keep scores
  >= score_threshold; greedy NMS best score first (ties in input order),
  dropping boxes with IoU > nms_iou; map back with per-axis factors
  content / source; clip boxes to the image.

Output JSON
-----------
{
  "threads": 2, "repeat": 5,
  "images": [{
    "path": "...", "width": 3000, "height": 2171,
    "faces": [{"bbox": [x1, y1, x2, y2], "score": 0.9,
               "landmarks": [[x, y] x 5]}, ...],      # best score first
    "timings_s": {"decode": .., "preprocess": .., "inference": ..,
                  "postprocess": .., "total": ..}     # medians over repeats
  }, ...]
}
"""

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import onnxruntime
from PIL import Image

STRIDES = (8, 16, 32)
ANCHORS_PER_CELL = 2


def fit(width, height, size):
    scale = min(size / width, size / height)
    content_w = min(max(int(math.floor(width * scale + 0.5)), 1), size)
    content_h = min(max(int(math.floor(height * scale + 0.5)), 1), size)
    return content_w, content_h


def preprocess(image, size):
    content_w, content_h = fit(image.width, image.height, size)
    if (content_w, content_h) != image.size:
        image = image.resize((content_w, content_h), resample=Image.Resampling.BILINEAR)
    canvas = np.zeros((size, size, 3), dtype=np.uint8)
    canvas[:content_h, :content_w] = np.asarray(image)
    blob = (canvas.astype(np.float32) - 127.5) / 128.0
    return blob.transpose(2, 0, 1)[np.newaxis].copy(), content_w, content_h


def anchor_centres(size, stride):
    cells = size // stride
    ys, xs = np.mgrid[:cells, :cells]
    centres = np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float32) * stride
    return np.repeat(centres, ANCHORS_PER_CELL, axis=0)


def nms(boxes, scores, iou_threshold):
    order = np.argsort(-scores, kind="stable")
    areas = np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)
    keep = []
    while order.size > 0:
        best = order[0]
        keep.append(int(best))
        rest = order[1:]
        w = np.maximum(np.minimum(boxes[best, 2], boxes[rest, 2]) - np.maximum(boxes[best, 0], boxes[rest, 0]), 0)
        h = np.maximum(np.minimum(boxes[best, 3], boxes[rest, 3]) - np.maximum(boxes[best, 1], boxes[rest, 1]), 0)
        inter = w * h
        union = areas[best] + areas[rest] - inter
        iou = np.where(union > 0, inter / np.where(union > 0, union, 1), 0)
        order = rest[iou <= iou_threshold]
    return keep


class Scrfd:
    def __init__(self, model, threads, size=640, score_threshold=0.5, nms_iou=0.4):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.size = size
        self.score_threshold = score_threshold
        self.nms_iou = nms_iou
        self.output_names = [f"{kind}_{stride}" for stride in STRIDES for kind in ("score", "bbox", "kps")]
        self.centres = {stride: anchor_centres(size, stride) for stride in STRIDES}

    def detect(self, image):
        timings = {}
        started = time.perf_counter()
        blob, content_w, content_h = preprocess(image, self.size)
        timings["preprocess"] = time.perf_counter() - started

        started = time.perf_counter()
        outputs = dict(zip(self.output_names, self.session.run(self.output_names, {self.input_name: blob})))
        timings["inference"] = time.perf_counter() - started

        started = time.perf_counter()
        all_scores, all_boxes, all_landmarks = [], [], []
        for stride in STRIDES:
            scores = outputs[f"score_{stride}"].reshape(-1)
            keep = scores >= self.score_threshold
            centres = self.centres[stride][keep]
            distances = outputs[f"bbox_{stride}"].reshape(-1, 4)[keep] * stride
            offsets = outputs[f"kps_{stride}"].reshape(-1, 5, 2)[keep] * stride
            all_scores.append(scores[keep])
            all_boxes.append(np.concatenate([centres - distances[:, :2], centres + distances[:, 2:]], axis=1))
            all_landmarks.append(centres[:, np.newaxis, :] + offsets)
        scores = np.concatenate(all_scores)
        boxes = np.concatenate(all_boxes)
        landmarks = np.concatenate(all_landmarks)
        keep = nms(boxes, scores, self.nms_iou)
        scale = np.array([content_w / image.width, content_h / image.height], dtype=np.float32)
        limits = np.array([image.width, image.height] * 2, dtype=np.float32)
        faces = []
        for index in keep:
            box = np.clip(boxes[index] / np.tile(scale, 2), 0, limits)
            faces.append({
                "bbox": [float(v) for v in box],
                "score": float(scores[index]),
                "landmarks": [[float(x), float(y)] for x, y in landmarks[index] / scale],
            })
        timings["postprocess"] = time.perf_counter() - started
        return faces, timings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output")
    parser.add_argument("images", nargs="+")
    parser.add_argument("--model", required=True, help="SCRFD ONNX model (scrfd 0.3.0 sdist models/scrfd.onnx)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    detector = Scrfd(args.model, args.threads)
    results = []
    for path in args.images:
        runs = []
        faces = None
        # One untimed run first: ONNX Runtime's first run of a session allocates its arenas.
        for attempt in range(args.repeat + 1):
            started = time.perf_counter()
            with Image.open(path) as opened:
                image = opened.convert("RGB")
            decode = time.perf_counter() - started
            faces, timings = detector.detect(image)
            timings["decode"] = decode
            timings["total"] = time.perf_counter() - started
            if attempt > 0:
                runs.append(timings)
        results.append({
            "path": path,
            "width": image.width,
            "height": image.height,
            "faces": faces,
            "timings_s": {key: statistics.median(run[key] for run in runs) for key in runs[0]},
        })
    with open(args.output, "w") as out:
        json.dump({"threads": args.threads, "repeat": args.repeat, "images": results}, out)


if __name__ == "__main__":
    sys.exit(main())
