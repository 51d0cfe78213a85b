"""Generates the blocking client (src/sandboxd/_sync) from the asyncio one (src/sandboxd/_async).

The async code is the one written by hand; this rewrites it token by token (``async def`` ->
``def``, ``await x`` -> ``x``, ``AsyncSandbox`` -> ``Sandbox``, ``aclose`` -> ``close`` ...).
``_io.py`` is hand-written on both sides: it holds what truly differs (sockets, locks, sleep).

    python scripts/unasync.py          # regenerate
    python scripts/unasync.py --check  # exit 1 when _sync is not what _async makes (a test runs this)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "sandboxd"
HEADER = "# Generated from sandboxd/_async/{name} by scripts/unasync.py: edit that file, then run the script.\n"

RULES = [
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_(bytes|text|lines|raw)\b", r"iter_\1"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncIterable\b", "Iterable"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\bsandboxd\._async\b", "sandboxd._sync"),
]


def convert(text: str) -> str:
    for pattern, repl in RULES:
        text = re.sub(pattern, repl, text)
    # `from typing import ..., Iterable, Iterator, ...` may now name one twice.
    def dedupe(m: re.Match) -> str:
        names = []
        for n in (x.strip() for x in m.group(1).split(",")):
            if n and n not in names:
                names.append(n)
        return "from typing import " + ", ".join(sorted(names, key=lambda s: (s.lower(), s)))

    return re.sub(r"from typing import ([^\n(]+)", dedupe, text)


def outputs() -> dict:
    out = {}
    for f in sorted((SRC / "_async").glob("*.py")):
        if f.name == "_io.py":
            continue
        out[SRC / "_sync" / f.name] = HEADER.format(name=f.name) + convert(f.read_text())
    return out


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for path, text in outputs().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not check:
                path.write_text(text)
    if check and stale:
        print("out of date (run scripts/unasync.py):", *[str(p) for p in stale], sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
