#!/usr/bin/env python3
"""Python reference of viss's transcript-to-subtitle aligner (src/text/align.rs).

The benchmark runs this next to the Rust implementation on the same input and
compares accuracy and time. It is written the way a straightforward Python
implementation would be: rank_bm25 for the lexical scores, onnxruntime +
tokenizers for the sentence embeddings, numpy for the matrices, and the
dynamic program as plain Python loops.

Usage:
    python3 src/bench/reference/align_reference.py INPUT.json OUTPUT.json \
        --onnx model.onnx --tokenizer tokenizer.json [--threads N]
    python3 src/bench/reference/align_reference.py INPUT.json OUTPUT.json --no-semantic
    (add --dump-embeddings EMB.json to save the context embeddings)

Needs: pip install numpy rank_bm25 onnxruntime tokenizers
(onnxruntime and tokenizers only without --no-semantic).

Input JSON
----------
{
  "lines":  [{"index": 0, "speaker": "Odile", "text": "Right. It is seven..."}, ...],
            # transcript dialogue lines in script order; "index" strictly
            # increasing; "speaker" may be null and is never used for scoring
  "cues":   [{"index": 0, "start_ms": 2300, "end_ms": 4100, "text": "Right..."}, ...],
            # subtitle cues sorted by start_ms
  "params": {"alpha": 0.8, "k1": 1.5, "b": 0.75, "window": 0, ...},
            # optional; the same fields and defaults as AlignParams in
            # align.rs; unknown fields are an error
  "truth":  [[0, 1], [], [2], ...],
            # optional; per line (by position), positions in "cues" that
            # carry it; empty = the line is not in the subtitles
  "units":  [[0, 23], [24, 51], ...]
            # optional; scenario units as inclusive ranges of line "index"
}

Output JSON
-----------
{
  "lines": [{"line": 0, "cues": [0, 1], "start_ms": 2300, "end_ms": 6900,
             "score": 0.93, "confidence": 0.88}, ...],
            # "cues" are cue "index" values; start/end null when unmatched
  "unmatched_cues": [17, 45, ...],
  "total_score": 123.4,
  "semantic": true,                 # false with --no-semantic (alpha forced to 0)
  "timings_s": {"load_model": .., "embedding": .., "lexical": .., "semantic": ..,
                "fusion": .., "dp": .., "total": ..},
            # "total" is everything after reading the input except load_model
  "accuracy": {"lines": .., "exact": .., "overlapping": .., "exact_rate": ..,
               "overlap_rate": .., "absent": .., "absent_unmatched": .., "missed": ..},
            # only with "truth"; same definitions as align::line_accuracy
  "spans": [{"first_line": 0, "last_line": 23, "start_ms": .., "end_ms": ..,
             "cue_indices": [..], "lines": 24, "matched_lines": 22,
             "confidence": 0.9, "flagged": false, "reason": null}, ...],
            # only with "units"
  "boundary_errors": {"compared": .., "missing": .., "mean_start_error_s": ..,
                      "max_start_error_s": .., "mean_end_error_s": ..,
                      "max_end_error_s": ..}
            # only with "units" and "truth"
}

Algorithm (see align.rs for the reasoning):
  lexical[i, j]  = BM25Okapi(cue tokens).get_scores(line i tokens)[j]
  semantic[i, j] = cosine(embed(line context i), embed(cue context j)),
                   contexts = texts of `window` neighbours each side joined by
                   spaces; embeddings = mean-pooled MiniLM, L2-normalised
  both normalised per params["normalisation"] (default: per-row min-max)
  fused = alpha * semantic + (1 - alpha) * lexical
  monotone DP with diagonal, split (one line over the next cue), merge (next
  line shares the cue) and skips; confidence from forward + backward
  max-marginals: 1 - exp(-(optimum - best other assignment) / confidence_scale).
"""

import argparse
import json
import math
import sys
import time

import numpy as np

DEFAULT_PARAMS = {
    "alpha": 0.8,
    "k1": 1.5,
    "b": 0.75,
    "window": 0,
    "normalisation": "row_min_max",
    "match_threshold": 0.5,
    "line_skip_penalty": 0.05,
    "cue_skip_penalty": 0.3,
    "split_penalty": 0.0,
    "continuation_min_score": 0.3,
    "merge_penalty": 0.4,
    "confidence_scale": 0.25,
    "min_confidence": 0.5,
    "span_line_min_confidence": 0.05,
    "min_matched_fraction": 0.5,
    "max_gap_ms": 30000,
    # Accepted so the Rust side can pass all its params; the span flags these two drive are
    # not reproduced here (they change no match and no time).
    "max_unmatched_cues": 3,
    "max_lead_ms": 10000,
    "max_text_chars": 10000,
}

APOSTROPHES = set("'\u2019\u2018\u02bc\uff07`\u00b4")


def tokenize(text):
    """Same rules as bm25::tokenize: lowercase runs of letters/digits; an
    apostrophe between two word characters stays (as ')."""
    tokens, current, pending_apostrophe = [], [], False
    for c in text:
        if c.isalnum():
            if pending_apostrophe:
                current.append("'")
                pending_apostrophe = False
            current.append(c.lower())
        elif c in APOSTROPHES and current and not pending_apostrophe:
            pending_apostrophe = True
        else:
            pending_apostrophe = False
            if current:
                tokens.append("".join(current))
                current = []
    if current:
        tokens.append("".join(current))
    return tokens


def normalise(matrix, how):
    """Rescale to [0, 1]; constant rows (or a constant matrix) become 0."""
    m = matrix.astype(np.float64)
    if m.size == 0:
        return m
    if how == "matrix_min_max":
        low, high = m.min(), m.max()
        return np.clip((m - low) / (high - low), 0, None) if high > low else np.zeros_like(m)
    if how == "row_min_max":
        low = m.min(axis=1, keepdims=True)
    elif how == "row_mean_max":
        low = m.mean(axis=1, keepdims=True)
    else:
        raise SystemExit(f"unknown normalisation {how!r}; use row_min_max, row_mean_max or matrix_min_max")
    high = m.max(axis=1, keepdims=True)
    spread = high - low
    safe = np.where(spread > 0, spread, 1.0)
    return np.where(spread > 0, np.clip((m - low) / safe, 0, None), 0.0)


def lexical_scores(lines, cues, params):
    from rank_bm25 import BM25Okapi

    corpus = [tokenize(c["text"]) for c in cues]
    if not any(corpus):
        raise SystemExit("no cue text has a word in it; check the subtitles' text survived parsing")
    bm25 = BM25Okapi(corpus, k1=params["k1"], b=params["b"], epsilon=0.25)
    raw = np.array([bm25.get_scores(tokenize(l["text"])) for l in lines], dtype=np.float64)
    return normalise(raw.reshape(len(lines), len(cues)), params["normalisation"])


def contexts(texts, window):
    out = []
    for centre in range(len(texts)):
        first, last = max(0, centre - window), min(len(texts) - 1, centre + window)
        out.append(" ".join(t.strip() for t in texts[first : last + 1] if t.strip()))
    return out


class Embedder:
    def __init__(self, onnx_path, tokenizer_path, threads):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(tokenizer_path)
        # Keep the file's truncation, but pad each batch only to its longest
        # text: masked mean pooling makes the result the same either way.
        self.tokenizer.no_padding()
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def embed(self, texts, batch_size=64):
        vectors = []
        for start in range(0, len(texts), batch_size):
            encodings = self.tokenizer.encode_batch(texts[start : start + batch_size])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.input_names:
                feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
            hidden = self.session.run(None, feed)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            vectors.append(pooled / np.clip(norms, 1e-12, None))
        return np.concatenate(vectors) if vectors else np.zeros((0, 384), dtype=np.float32)


def semantic_scores(line_vecs, cue_vecs, how):
    def unit(v):
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return v / np.where(n > 0, n, 1.0)

    cosine = unit(np.asarray(line_vecs, dtype=np.float32)) @ unit(np.asarray(cue_vecs, dtype=np.float32)).T
    return normalise(cosine, how)


NEG = float("-inf")


def lattice(gain, params, keep_backtrace):
    """Forward DP; returns (matched, prefix, matched_from, prefix_from) as
    (n + 1) x (m + 1) nested lists. matched[i][j]: best score whose last
    match is line i-1 with cue j-1; prefix[i][j]: best score having decided
    lines < i and cues < j."""
    n, m = gain.shape
    ls, cs = params["line_skip_penalty"], params["cue_skip_penalty"]
    sp, mp = params["split_penalty"], params["merge_penalty"]
    g = gain.tolist()
    matched = [[NEG] * (m + 1) for _ in range(n + 1)]
    prefix = [[0.0] * (m + 1) for _ in range(n + 1)]
    matched_from = [[0] * (m + 1) for _ in range(n + 1)] if keep_backtrace else None
    prefix_from = [[0] * (m + 1) for _ in range(n + 1)] if keep_backtrace else None
    for j in range(1, m + 1):
        prefix[0][j] = prefix[0][j - 1] - cs
        if keep_backtrace:
            prefix_from[0][j] = 2
    for i in range(1, n + 1):
        above_m, here_m = matched[i - 1], matched[i]
        above_p, here_p = prefix[i - 1], prefix[i]
        row_gain = g[i - 1]
        here_p[0] = above_p[0] - ls
        if keep_backtrace:
            prefix_from[i][0] = 1
        for j in range(1, m + 1):
            best, origin = above_p[j - 1], 0
            split = here_m[j - 1] - sp
            if split > best:
                best, origin = split, 1
            merge = above_m[j] - mp
            if merge > best:
                best, origin = merge, 2
            value = best + row_gain[j - 1]
            here_m[j] = value
            best_prefix, step = value, 0
            skip_line = above_p[j] - ls
            if skip_line > best_prefix:
                best_prefix, step = skip_line, 1
            skip_cue = here_p[j - 1] - cs
            if skip_cue > best_prefix:
                best_prefix, step = skip_cue, 2
            here_p[j] = best_prefix
            if keep_backtrace:
                matched_from[i][j] = origin
                prefix_from[i][j] = step
    return matched, prefix, matched_from, prefix_from


def best_path(matched_from, prefix_from, n, m):
    spans = [None] * n
    i, j, in_match = n, m, False
    while i > 0 or j > 0:
        if in_match:
            first_last = spans[i - 1]
            spans[i - 1] = (j - 1, first_last[1]) if first_last else (j - 1, j - 1)
            origin = matched_from[i][j]
            if origin == 1:
                j -= 1
            elif origin == 2:
                i -= 1
            else:
                i, j, in_match = i - 1, j - 1, False
        else:
            step = prefix_from[i][j]
            if step == 0:
                in_match = True
            elif step == 1:
                i -= 1
            else:
                j -= 1
    return spans


def align(lines, cues, fused, params):
    n, m = fused.shape
    if n == 0:
        return {"lines": [], "unmatched_cues": [c["index"] for c in cues], "total_score": 0.0}
    if m == 0:
        raise SystemExit("there are no subtitle cues to align against")
    gain = fused - params["match_threshold"]
    f_matched, f_prefix, matched_from, prefix_from = lattice(gain, params, True)
    b_matched, b_prefix, _, _ = lattice(gain[::-1, ::-1], params, False)
    spans = best_path(matched_from, prefix_from, n, m)
    optimum = f_prefix[n][m]
    scale, ls = params["confidence_scale"], params["line_skip_penalty"]
    out, covered = [], [False] * m
    for i, span in enumerate(spans):
        through = [
            f_matched[i + 1][j + 1] + b_matched[n - i][m - j] - gain[i, j] for j in range(m)
        ]
        skipping_line = max(f_prefix[i][c] + b_prefix[n - 1 - i][m - c] for c in range(m + 1)) - ls
        if span is None:
            runner_up = max(through)
        else:
            first, last = span
            others = [through[j] for j in range(m) if j < first or j > last]
            runner_up = max(others + [skipping_line])
        margin = max(optimum - runner_up, 0.0)
        confidence = 1.0 - math.exp(-margin / scale) if math.isfinite(margin) else 1.0
        if span is None:
            out.append({"line": lines[i]["index"], "cues": [], "start_ms": None, "end_ms": None,
                        "score": 0.0, "confidence": confidence})
            continue
        first, last = span
        # Cues at either end of a line's run scoring below continuation_min_score are dropped.
        keep = params["continuation_min_score"]
        while first < last and fused[i, first] < keep:
            first += 1
        while last > first and fused[i, last] < keep:
            last -= 1
        for j in range(first, last + 1):
            covered[j] = True
        out.append({
            "line": lines[i]["index"],
            "cues": [cues[j]["index"] for j in range(first, last + 1)],
            "start_ms": cues[first]["start_ms"],
            "end_ms": max(cues[j]["end_ms"] for j in range(first, last + 1)),
            "score": float(fused[i, first : last + 1].mean()),
            "confidence": confidence,
        })
    return {
        "lines": out,
        "unmatched_cues": [c["index"] for c, hit in zip(cues, covered) if not hit],
        "total_score": optimum,
    }


def truth_alignment(lines, cues, truth):
    out = []
    for line, positions in zip(lines, truth):
        positions = sorted(positions)
        out.append({
            "line": line["index"],
            "cues": [cues[p]["index"] for p in positions],
            "start_ms": min((cues[p]["start_ms"] for p in positions), default=None),
            "end_ms": max((cues[p]["end_ms"] for p in positions), default=None),
            "score": 1.0 if positions else 0.0,
            "confidence": 1.0,
        })
    return {"lines": out}


def line_accuracy(predicted, truth):
    acc = {"lines": len(truth["lines"]), "exact": 0, "overlapping": 0, "exact_rate": 0.0,
           "overlap_rate": 0.0, "absent": 0, "absent_unmatched": 0, "missed": 0}
    for ours, expected in zip(predicted["lines"], truth["lines"]):
        exact = ours["cues"] == expected["cues"]
        acc["exact"] += exact
        acc["overlapping"] += exact or bool(set(ours["cues"]) & set(expected["cues"]))
        if not expected["cues"]:
            acc["absent"] += 1
            acc["absent_unmatched"] += not ours["cues"]
        elif not ours["cues"]:
            acc["missed"] += 1
    if acc["lines"]:
        acc["exact_rate"] = acc["exact"] / acc["lines"]
        acc["overlap_rate"] = acc["overlapping"] / acc["lines"]
    return acc


def scenario_spans(alignment, units, params):
    spans = []
    for first_line, last_line in units:
        members = [l for l in alignment["lines"] if first_line <= l["line"] <= last_line]
        matched = [l for l in members if l["cues"]]
        anchors = [l for l in matched if l["confidence"] >= params["span_line_min_confidence"]]
        reasons = []
        if first_line > last_line:
            reasons.append(f"the unit's first line {first_line} comes after its last line {last_line}")
        elif not members:
            reasons.append(f"no transcript line has an index in {first_line}..={last_line}")
        elif not matched:
            reasons.append(f"none of its {len(members)} lines was found in the subtitles: it may be "
                           "cut from this broadcast, or the subtitles belong to another version")
        elif not anchors:
            reasons.append(f"none of its {len(members)} lines was found in the subtitles with confidence "
                           f"(the {len(matched)} matched are coin flips below "
                           f"{params['span_line_min_confidence']:.2f}); it is probably cut from this broadcast")
        confidence = sum(l["confidence"] for l in matched) / len(matched) if matched else 0.0
        if anchors:
            if len(matched) / len(members) < params["min_matched_fraction"]:
                reasons.append(f"only {len(matched)} of its {len(members)} lines were found in the subtitles")
            if confidence < params["min_confidence"]:
                reasons.append(f"mean line confidence {confidence:.2f} is below {params['min_confidence']:.2f}")
            for a, b in zip(anchors, anchors[1:]):
                gap = max(b["start_ms"] - a["end_ms"], 0)
                if gap > params["max_gap_ms"]:
                    reasons.append(f"{gap / 1000:.1f} s pass between lines {a['line']} and {b['line']}; "
                                   "one of them is probably matched to the wrong cue")
                    break
        spans.append({
            "first_line": first_line, "last_line": last_line,
            "start_ms": min((l["start_ms"] for l in anchors), default=None),
            "end_ms": max((l["end_ms"] for l in anchors), default=None),
            "cue_indices": sorted({c for l in anchors for c in l["cues"]}),
            "lines": len(members), "matched_lines": len(matched), "confidence": confidence,
            "flagged": bool(reasons), "reason": "; ".join(reasons) if reasons else None,
        })
    return spans


def boundary_errors(predicted, truth):
    starts, ends, missing = [], [], 0
    for ours, expected in zip(predicted, truth):
        if expected["start_ms"] is None:
            continue
        if ours["start_ms"] is None:
            missing += 1
            continue
        starts.append(abs(ours["start_ms"] - expected["start_ms"]) / 1000)
        ends.append(abs(ours["end_ms"] - expected["end_ms"]) / 1000)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    return {"compared": len(starts), "missing": missing,
            "mean_start_error_s": mean(starts), "max_start_error_s": max(starts, default=0.0),
            "mean_end_error_s": mean(ends), "max_end_error_s": max(ends, default=0.0)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--onnx", help="MiniLM ONNX model (e.g. all-MiniLM-L6-v2 model.onnx)")
    parser.add_argument("--tokenizer", help="its tokenizer.json")
    parser.add_argument("--no-semantic", action="store_true",
                        help="lexical scores only (alpha forced to 0); no model needed")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0 = its default)")
    parser.add_argument("--dump-embeddings", help="write the line and cue context embeddings to this JSON file")
    args = parser.parse_args()
    if not args.no_semantic and not (args.onnx and args.tokenizer):
        parser.error("pass --onnx and --tokenizer, or --no-semantic for lexical scores only")

    with open(args.input, encoding="utf-8") as f:
        data = json.load(f)
    params = dict(DEFAULT_PARAMS)
    unknown = set(data.get("params", {})) - set(DEFAULT_PARAMS)
    if unknown:
        raise SystemExit(f"unknown params {sorted(unknown)}; known: {sorted(DEFAULT_PARAMS)}")
    params.update(data.get("params", {}))
    if args.no_semantic:
        params["alpha"] = 0.0
    lines, cues = data["lines"], data["cues"]
    cap = params["max_text_chars"]
    for item in lines + cues:
        item["text"] = item["text"][:cap]
    timings = {"load_model": 0.0, "embedding": 0.0, "lexical": 0.0, "semantic": 0.0, "fusion": 0.0, "dp": 0.0}

    embedder = None
    if not args.no_semantic:
        t = time.perf_counter()
        embedder = Embedder(args.onnx, args.tokenizer, args.threads)
        timings["load_model"] = time.perf_counter() - t

    started = time.perf_counter()
    t = time.perf_counter()
    lexical = lexical_scores(lines, cues, params) if cues else np.zeros((len(lines), 0))
    timings["lexical"] = time.perf_counter() - t

    fused = lexical
    if embedder is not None:
        t = time.perf_counter()
        line_vecs = embedder.embed(contexts([l["text"] for l in lines], params["window"]))
        cue_vecs = embedder.embed(contexts([c["text"] for c in cues], params["window"]))
        timings["embedding"] = time.perf_counter() - t
        if args.dump_embeddings:
            with open(args.dump_embeddings, "w") as f:
                json.dump({"window": params["window"], "lines": line_vecs.tolist(), "cues": cue_vecs.tolist()}, f)
        t = time.perf_counter()
        semantic = semantic_scores(line_vecs, cue_vecs, params["normalisation"])
        timings["semantic"] = time.perf_counter() - t
        t = time.perf_counter()
        fused = params["alpha"] * semantic + (1 - params["alpha"]) * lexical
        timings["fusion"] = time.perf_counter() - t

    t = time.perf_counter()
    result = align(lines, cues, fused, params)
    timings["dp"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - started

    result["semantic"] = embedder is not None
    result["timings_s"] = timings
    if "truth" in data:
        truth = truth_alignment(lines, cues, data["truth"])
        result["accuracy"] = line_accuracy(result, truth)
    if "units" in data:
        result["spans"] = scenario_spans(result, data["units"], params)
        if "truth" in data:
            result["boundary_errors"] = boundary_errors(
                result["spans"], scenario_spans(truth, data["units"], params))
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    summary = {k: result[k] for k in ("accuracy", "boundary_errors") if k in result}
    print(json.dumps({"timings_s": timings, **summary}, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
