"""text-stats entrypoint for the `script` engine.

Reads the turn request (one JSON object) from stdin, writes artifacts/report.md in the run
directory and prints the output object as the last JSON on stdout.
"""

import json
import os
import re
import sys
from collections import Counter

WORD = re.compile(r"[\w'-]+", re.UNICODE)


def analyse(text, top_n):
    words = [w.lower() for w in WORD.findall(text)]
    top = Counter(words).most_common(top_n)
    return {
        "line_count": len(text.splitlines()),
        "word_count": len(words),
        "char_count": len(text),
        "top_words": [{"word": w, "count": c} for w, c in top],
        "report": "report.md",
    }


def render(stats):
    rows = "\n".join(f"| {t['word']} | {t['count']} |" for t in stats["top_words"])
    return (
        "# Text statistics\n\n"
        f"- lines: {stats['line_count']}\n"
        f"- words: {stats['word_count']}\n"
        f"- characters: {stats['char_count']}\n\n"
        "| word | count |\n|---|---|\n"
        f"{rows}\n"
    )


def main():
    request = json.load(sys.stdin)
    inputs = request.get("input") or {}
    params = request.get("parameter") or {}
    if inputs.get("document"):
        with open(inputs["document"], encoding="utf-8") as f:
            text = f.read()
    elif isinstance(inputs.get("text"), str):
        text = inputs["text"]
    else:
        print(json.dumps({"success": False, "error": {
            "code": "INVALID_INPUT", "message": "provide either 'text' or 'document'"}}))
        return
    stats = analyse(text, int(params.get("top_n", 5)))
    run_dir = request.get("run_dir") or os.environ.get("SKILL_RUNNER_RUN_DIR", ".")
    artifacts = os.path.join(run_dir, "artifacts")
    os.makedirs(artifacts, exist_ok=True)
    with open(os.path.join(artifacts, "report.md"), "w", encoding="utf-8") as f:
        f.write(render(stats))
    print(json.dumps(stats, ensure_ascii=False))


if __name__ == "__main__":
    main()
