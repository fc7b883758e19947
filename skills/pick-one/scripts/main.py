"""pick-one entrypoint for the `script` engine. In an interactive run the first turn asks a
`choose_one` question (printing `{"ask_user": ...}`); the next turn receives the reply and
reports it. In an auto run nobody can answer, so it picks the first colour itself."""

import json
import sys

COLOURS = ["red", "green", "blue"]
request = json.load(sys.stdin)
mode = request.get("execution_mode", "auto")
history = request.get("history", [])
print(f"turn {request.get('turn', 1)}: {len(history)} answer(s) so far", file=sys.stderr, flush=True)
if mode == "interactive" and not history:
    print(json.dumps({"ask_user": {
        "interaction_id": 1,
        "kind": "choose_one",
        "prompt": "Which colour do you like?",
        "options": COLOURS,
        "default_decision_policy": "pick_first",
    }}))
else:
    choice = history[-1]["response"] if history else COLOURS[0]
    print(json.dumps({"choice": str(choice), "asked": len(history)}))
