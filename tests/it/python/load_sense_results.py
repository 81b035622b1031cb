"""Reads the AgentSense results `viss export --sense-results` adds to a dataset the way a
researcher would, with the Hugging Face `datasets` library (the card's `sense_goals` and
`sense_questions` configs). Prints what it read as one JSON object for the Rust test to check."""

import json
import sys

import datasets


def main(directory):
    goals = datasets.load_dataset(directory, "sense_goals", split="test")
    questions = datasets.load_dataset(directory, "sense_questions", split="test")
    out = {
        "goal_rows": len(goals),
        "perspectives": sorted(set(goals["perspective"])),
        "missing_verdicts": sum(1 for value in goals["achieved"] if value is None),
        "question_rows": len(questions),
        "correct": [value for value in questions["correct"]],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
