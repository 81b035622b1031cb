"""Reads the AgentSense half of a viss export the way its users would: SOTOPIA's own profile
models (sotopia.database, local storage backend) on the sotopia/ files, and the Hugging Face
`datasets` library on the `templates` and `instances` configs the card declares.
Prints what it read as one JSON object for the Rust test to check."""

import json
import os
import sys

os.environ.setdefault("SOTOPIA_STORAGE_BACKEND", "local")

import datasets  # noqa: E402
from sotopia.database import EnvAgentComboStorage  # noqa: E402
from sotopia.database.persistent_profile import (  # noqa: E402
    AgentProfile,
    EnvironmentProfile,
    RelationshipType,
)


def lines(path):
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def main(directory):
    sotopia = os.path.join(directory, "sotopia")
    agents = [AgentProfile(**row) for row in lines(os.path.join(sotopia, "agent_profiles.jsonl"))]
    environments = [
        EnvironmentProfile(**row)
        for row in lines(os.path.join(sotopia, "environment_profiles.jsonl"))
    ]
    combos = [
        EnvAgentComboStorage(**row) for row in lines(os.path.join(sotopia, "env_agent_combos.jsonl"))
    ]
    agent_ids = {agent.pk for agent in agents}
    environment_ids = {environment.pk for environment in environments}
    # Every combination names an environment and agents that are in the files, one agent per goal.
    unpaired = [
        combo.pk
        for combo in combos
        if combo.env_id not in environment_ids
        or any(agent not in agent_ids for agent in combo.agent_ids)
    ]
    by_id = {environment.pk: environment for environment in environments}
    goal_counts_match = all(
        len(by_id[combo.env_id].agent_goals) == len(combo.agent_ids) for combo in combos
    )
    first_agent = agents[0]
    first_environment = environments[0]
    templates = datasets.load_dataset(directory, "templates", split="test")
    instances = datasets.load_dataset(directory, "instances", split="test")
    out = {
        "agents": len(agents),
        "environments": len(environments),
        "combos": len(combos),
        "unpaired": unpaired,
        "goal_counts_match": goal_counts_match,
        "first_agent": {
            "first_name": first_agent.first_name,
            "last_name": first_agent.last_name,
            "age": first_agent.age,
            "gender": first_agent.gender,
            "gender_pronoun": first_agent.gender_pronoun,
            "big_five": first_agent.big_five,
            "moral_values": first_agent.moral_values,
            "decision_making_style": first_agent.decision_making_style,
            "secret": first_agent.secret,
        },
        "first_environment": {
            "codename": first_environment.codename,
            "scenario": first_environment.scenario,
            "agent_goals": first_environment.agent_goals,
            "relationship": RelationshipType(first_environment.relationship).name,
            "age_constraint": first_environment.age_constraint,
        },
        "template_rows": len(templates),
        "template_columns": sorted(templates.column_names),
        "instance_rows": len(instances),
        "first_instance_names": [
            character["first_name"] for character in instances[0]["characters"]
        ],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
