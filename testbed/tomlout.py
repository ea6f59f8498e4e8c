"""TOML text for the small documents the testbed writes (job files, generated fabrics).

Python reads TOML (``tomllib``) but does not write it. The documents written here
are tables of strings, numbers, booleans and arrays of those (or of tables), which
this covers; anything else is refused rather than written wrong.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _string(text: str) -> str:
    # JSON escapes what TOML's basic strings must (quote, backslash, U+0000..U+001F) but for DEL; not ASCII-only,
    # since JSON would write astral characters as surrogate pairs, which TOML refuses.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _string(k)  # not match(): "$" also matches before a final newline


def _value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where}: {v} has no TOML form here")
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x, f"{where}[{i}]") for i, x in enumerate(v)) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(str(k))} = {_value(x, f'{where}.{k}')}" for k, x in v.items()) + " }"
    raise ValueError(f"{where}: cannot write {type(v).__name__} as TOML")


def dumps(doc: dict[str, Any]) -> str:
    """``doc`` as TOML; ``tomllib.loads(dumps(doc)) == doc`` for the documents described above."""
    lines: list[str] = []

    def table(path: list[str], t: dict[str, Any], header: str | None) -> None:
        plain = {k: v for k, v in t.items() if not _is_table(v) and not _is_table_array(v)}
        if header is not None and (plain or not t or header.startswith("[[")):
            lines.append(header)
        for k, v in plain.items():
            lines.append(f"{_key(k)} = {_value(v, '.'.join([*path, k]))}")
        for k, v in t.items():
            sub = [*path, k]
            name = ".".join(_key(p) for p in sub)
            if _is_table(v):
                lines.append("")
                table(sub, v, f"[{name}]")
            elif _is_table_array(v):
                for item in v:
                    lines.append("")
                    table(sub, item, f"[[{name}]]")

    table([], doc, None)
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
