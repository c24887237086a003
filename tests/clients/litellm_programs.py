"""Runs the program suite's chat programs through `sgl.LiteLLM`, in the litellm venv with this
checkout on PYTHONPATH (so `import sglang` is ours; the frontend never imports torch).

    python litellm_programs.py --url URL --api-key KEY --out FILE PROGRAM...

The backend is `sgl.LiteLLM("openai/default", base_url=URL/v1, api_key=KEY)`: LiteLLM's OpenAI
provider against our server's OpenAI routes. One JSON line per program: {"program", "ok",
"error", "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from typing import Any

import sglang as sgl
from sglang.ci.suites.programs import PROGRAMS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("programs", nargs="+")
    args = parser.parse_args()
    cases = {case.name: case for case in PROGRAMS}
    backend = sgl.LiteLLM("openai/default", base_url=args.url + "/v1", api_key=args.api_key, max_retries=0)
    sgl.set_default_backend(backend)
    with open(args.out, "w") as out:
        for name in args.programs:
            started = time.monotonic()
            try:
                cases[name].check()
                record: dict[str, Any] = {"program": name, "ok": True, "error": None}
            except Exception:
                record = {"program": name, "ok": False, "error": traceback.format_exc()}
            record["seconds"] = round(time.monotonic() - started, 2)
            out.write(json.dumps(record) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
