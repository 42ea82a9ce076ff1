"""Generates python/src/fleet/models.py from cloud/openapi.json with datamodel-code-generator.

The options are fixed here, and only here, so that the output depends on nothing but the
document and the pinned generator (python/requirements-dev.txt): test/python-sdk-models.test.ts
runs this script into a temporary file and fails when the checked-in models differ.

    python python/scripts/generate_models.py [--out PATH]    (or: npm run sdk:models)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = REPO_ROOT / "cloud" / "openapi.json"
DEFAULT_OUT = REPO_ROOT / "python" / "src" / "fleet" / "models.py"

HEADER = "# Generated from cloud/openapi.json by python/scripts/generate_models.py (npm run sdk:models): do not edit."

OPTIONS = [
    "--input-file-type",
    "openapi",
    "--openapi-scopes",
    "schemas",
    "--output-model-type",
    "pydantic_v2.BaseModel",
    "--target-python-version",
    "3.10",
    "--use-annotated",
    "--field-constraints",
    "--use-standard-collections",
    "--use-union-operator",
    # Fields typed as plain values (`int | None`), not one-field wrapper classes.
    "--use-type-alias",
    "--enum-field-as-literal",
    "all",
    "--use-schema-description",
    "--use-field-description",
    "--output-datetime-class",
    "AwareDatetime",
    # Answers from a newer server may carry fields this SDK does not know: kept, not refused.
    # Requests are checked by the SDK's own keyword arguments before sending.
    "--extra-fields",
    "allow",
    "--disable-timestamp",
    "--formatters",
    "black",
    "isort",
    "--custom-file-header",
    HEADER,
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    command = [
        sys.executable,
        "-m",
        "datamodel_code_generator",
        "--input",
        str(DOCUMENT),
        "--output",
        str(args.out),
        *OPTIONS,
    ]
    code = subprocess.run(command, cwd=REPO_ROOT, check=False).returncode
    if code == 0:
        _annotate_constr(args.out)
    return code


_CONSTR = re.compile(r"\bconstr\(([^()]*)\)")


def _annotate_constr(path: Path) -> None:
    """datamodel-code-generator 0.89 writes ``constr(...)`` for a constrained string inside a union
    (a dataset filter's ``str | float | bool`` values) even with --use-annotated, and mypy --strict
    refuses a call in an annotation. The same constraint as ``Annotated[str, StringConstraints(...)]``
    is what it writes everywhere else; pydantic validates both alike."""
    text = path.read_text()
    if _CONSTR.search(text) is None:
        return
    text = _CONSTR.sub(r"Annotated[str, StringConstraints(\1)]", text)
    text = re.sub(r"^    constr,\n", "", text, flags=re.M)
    if "StringConstraints" not in text.split("\n\n\n", 1)[0]:
        text = text.replace("from pydantic import (\n", "from pydantic import (\n    StringConstraints,\n", 1)
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
