"""Writes reference.json: fixture tables of judge labels and the agreement and test values that
independent implementations compute for them, for viss-eval's tests to match.

Run with the versions recorded in the output (pip install statsmodels krippendorff scipy numpy):
    python3 crates/eval/testdata/reference.py > crates/eval/testdata/reference.json
Labels are ranks: 0 Not Achieved, 1 Partially Achieved, 2 Achieved; null is a missing judgement.
"""

import json
import random
import re
from importlib.metadata import version

import krippendorff
import numpy as np
import scipy
import statsmodels
from scipy import stats
from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa


def table(rng, tasks, judges, bias, missing):
    """Labels of `judges` judges on `tasks` tasks: a shared truth per task that each judge keeps
    with probability `bias`, else a uniform label; each judgement missing with `missing`."""
    rows = []
    for _ in range(tasks):
        truth = rng.randrange(3)
        row = []
        for _ in range(judges):
            label = truth if rng.random() < bias else rng.randrange(3)
            row.append(None if rng.random() < missing else label)
        rows.append(row)
    return rows


def reference(name, rows):
    complete = [row for row in rows if None not in row]
    counts, _ = aggregate_raters(np.array(complete), n_cat=3)
    # krippendorff takes judges as rows and tasks as columns, nan for a missing judgement.
    by_judge = np.array([[np.nan if v is None else v for v in row] for row in rows]).T
    return {
        "name": name,
        "tasks": rows,
        "fleiss_kappa_complete_tasks": fleiss_kappa(counts, method="fleiss"),
        "krippendorff_alpha_ordinal": krippendorff.alpha(
            reliability_data=by_judge, level_of_measurement="ordinal", value_domain=[0, 1, 2]
        ),
    }


rng = random.Random(20261127)
tables = [
    reference("three judges, fair agreement", table(rng, 40, 3, 0.6, 0.0)),
    reference("three judges, strong agreement, some missing", table(rng, 60, 3, 0.85, 0.08)),
    reference("five judges, weak agreement, some missing", table(rng, 30, 5, 0.3, 0.1)),
    reference("two judges, moderate agreement", table(rng, 25, 2, 0.5, 0.0)),
]
chi_square = [
    {"statistic": x, "degrees_of_freedom": df, "upper_tail": stats.chi2.sf(x, df)}
    for x, df in [(25.0, 3), (1.0, 3), (7.8, 3), (0.5, 1), (18.3, 10), (3.2, 4)]
]
text = (
    json.dumps(
        {
            "produced_by": {
                "numpy": np.__version__,
                "scipy": scipy.__version__,
                "statsmodels": statsmodels.__version__,
                "krippendorff": version("krippendorff"),
            },
            "tables": tables,
            "chi_square": chi_square,
        },
        indent=1,
    )
)
# One line per task.
print(re.sub(r"\[\s+([^\[\]]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text))
