"""hello entrypoint for the `script` engine: reads the turn request from stdin and prints the
output object as JSON."""

import json
import sys

request = json.load(sys.stdin)
greeting = f"Hello, {request['input']['name']}!"
if request.get("parameter", {}).get("shout"):
    greeting = greeting.upper()
print(json.dumps({"greeting": greeting}))
