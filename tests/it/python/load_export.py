"""Reads a viss export (written with --traces and --results) the way a researcher would, with
the real loaders: the Hugging Face `datasets` library (every config the card declares), pandas
and pyarrow on data.parquet.
Prints what it read as one JSON object for the Rust test to check."""

import json
import sys

import datasets
import pandas
import pyarrow.parquet as pq


def main(directory):
    out = {"datasets_version": datasets.__version__}
    scenarios = datasets.load_dataset(directory, split="test")
    out["rows"] = len(scenarios)
    out["features"] = {name: type(feature).__name__ for name, feature in scenarios.features.items()}
    out["role_features"] = {
        name: type(feature).__name__ for name, feature in scenarios.features["roles"].feature.items()
    }
    first = scenarios[0]
    out["first_id"] = first["id"]
    group = first["group_image"]
    out["group_image"] = {"type": type(group).__name__, "size": list(group.size), "mode": group.mode}
    out["group_image_info"] = first["group_image_info"]
    portrait = first["roles"][0]["portrait"]
    out["portrait"] = {"type": type(portrait).__name__, "size": list(portrait.size)}
    out["turns"] = first["turns"]

    table = datasets.load_dataset(directory, "table", split="test")
    out["table_rows"] = len(table)
    out["table_group_image_path"] = table[0]["group_image"]["path"]

    turns = datasets.load_dataset(directory, "traces", split="test")
    out["turn_rows"] = len(turns)
    out["first_turn"] = {key: turns[0][key] for key in ("run", "turn", "speaker", "message")}

    results = datasets.load_dataset(directory, "results", split="test")
    out["result_rows"] = len(results)
    keys = ("run", "character", "model", "task", "label", "verdict")
    out["first_results"] = [{key: results[i][key] for key in keys} for i in range(2)]

    frame = pandas.read_parquet(f"{directory}/data.parquet")
    out["pandas_rows"] = len(frame)
    out["pandas_roles"] = len(frame["roles"][0])
    arrow = pq.read_table(f"{directory}/data.parquet")
    out["arrow_types"] = {field.name: str(field.type) for field in arrow.schema}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
