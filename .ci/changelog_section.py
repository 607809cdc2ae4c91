#!/usr/bin/env python3
"""Print the section of CHANGELOG.md (Keep a Changelog format) for one version.

    python3 .ci/changelog_section.py 0.1.0 [CHANGELOG.md]

The release workflow uses the output as the draft release's notes. Exits 1, saying
why, when the version has no section or its section is empty, so that a tag whose
notes were forgotten fails before anything is published.
"""
import re
import sys


def section(text: str, version: str) -> str:
    # "## [0.1.0] - 2026-12-05" or "## [0.1.0]"; the next "## " heading ends it.
    heading = re.compile(r"^## \[" + re.escape(version) + r"\](\s+-\s+\S+)?\s*$")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if heading.match(line)), None)
    if start is None:
        raise LookupError(f"CHANGELOG has no '## [{version}]' heading")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
        len(lines),
    )
    # Link references ("[0.1.0]: https://...") at the end belong to the whole file.
    body = [line for line in lines[start + 1 : end] if not re.match(r"^\[[^\]]+\]:\s", line)]
    notes = "\n".join(body).strip()
    if not notes:
        raise LookupError(f"CHANGELOG's section for {version} is empty")
    return notes + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path = argv[2] if len(argv) == 3 else "CHANGELOG.md"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        sys.stdout.write(section(text, argv[1]))
    except LookupError as e:
        print(f"changelog_section: {e} ({path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
