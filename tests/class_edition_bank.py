"""Run in the class edition's environment: the visible check of every bug-bank variant, its code.

    python class_edition_bank.py VARIANTS.json CODES.json     (cwd: a learner's section folder)

VARIANTS.json lists {"id", "exercise", "source"}; CODES.json gets {id: code or null}.
"""
import contextlib
import io
import json
import linecache
import sys

import utils.checks as checks
from utils import edition

PRELUDE = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def code_of(variant: dict) -> str | None:
    source, filename = PRELUDE + variant["source"], f"<bugbank {variant['id']}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(checks, f"check_{variant['exercise']}")(namespace[variant["exercise"]])
    except checks.CheckError as err:
        return err.code
    return None


if __name__ == "__main__":
    assert edition.IS_STUDENT, "run me where the class edition is installed"
    variants = json.loads(open(sys.argv[1], encoding="utf-8").read())
    json.dump({v["id"]: code_of(v) for v in variants}, open(sys.argv[2], "w", encoding="utf-8"))
