"""The docs say what exists: every ``dlcp`` command, ``make`` target and repository path they show is real.

Read from ``README.md`` and ``docs/*.md``: command lines in fenced code blocks and in inline
code spans. A command's areas and verbs must be the parser's, and every ``--flag`` it shows
must be one that verb accepts. A command shown as typed must also parse as a whole with the
real argument parser (parse only: nothing runs): a line after a ``$`` prompt, a line in a
block with no placeholder (``FILE``, ``[--json]``, ``a|b``, ``...``), and an inline command
that gives its flags' values. Paths under the project's folders must exist. The job-file
table of ``docs/configuration.md`` names every field of ``dlcp.config`` with the code's
default, and the README's core example runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dlcp import config
from dlcp.cli.main import build_parser
from dlcp.protocol import MessageKind

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FOLDERS = ("dlcp", "host", "controller", "testbed", "simulations", "apps", "tests", "p4src", "docs")
"""Top-level folders: a doc's ``folder/...`` names a file or folder of the repository."""
OTHER_MAKEFILES = {"install"}
"""``make`` targets the docs name in other projects' builds (p4c's ``make install``, docs/switch.md)."""

PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})/[\w./+*-]*[\w/*])")
PLACEHOLDER = re.compile(r"\[|\||\.\.\.|…|(?<![\w-])[A-Z][A-Z0-9_]*(?![\w])")
"""What marks a synopsis rather than a command as typed: ``[optional]``, ``a|b``, ``...``, ``NAME``."""


@dataclass(frozen=True)
class Shown:
    """One ``dlcp`` command line as a doc shows it."""

    where: str
    line: str
    fenced: bool
    """In a fenced code block, where a command is shown whole (inline, ``dlcp switch`` names an area)."""
    typed: bool
    """Shown as typed (a prompt, or a fenced line with no placeholder): it must parse as a whole."""

    def __str__(self) -> str:
        return f"{self.where}: {self.line}"


def _code_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, code, in a fenced block): each line of a fenced block, ``\\`` continuations
    joined, and each inline code span (one that wraps onto the next line joined into one line)."""
    out: list[tuple[int, str, bool]] = []
    prose: list[str] = []  # the text outside fenced blocks, line for line (fenced lines blank)
    fenced = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
        elif fenced:
            prose.append("")
            if pending is not None:
                number, line = pending[0], pending[1] + " " + line.strip()
                pending = None
            if line.rstrip().endswith("\\"):
                pending = (number, line.rstrip()[:-1])
            else:
                out.append((number, line, True))
        else:
            prose.append(line)
    joined = "\n".join(prose)
    for m in re.finditer(r"`([^`]+)`", joined):
        out.append((joined.count("\n", 0, m.start()) + 1, " ".join(m[1].split()), False))
    return out


def _commands(text: str, where: str) -> list[Shown]:
    found = []
    start = re.compile(r"^(\$ )?(?:sudo )?(?:\.venv/bin/)?dlcp ([a-z][\w-]*\b.*)")  # any area: a typo fails
    for number, code, fenced in _code_lines(text):
        code = code.split(" #", 1)[0].strip()
        for part in re.split(r"\s--\s", code):  # `dlcp testbed run FABRIC -- dlcp train ...`: two commands
            m = start.match(part.strip())
            if m:
                line = "dlcp " + m.group(2)
                # Inline, a command is whole when it gives flags and ends with a value (not `--config`).
                whole = fenced or (" -" in line and not line.split()[-1].startswith("-"))
                typed = bool(m.group(1)) or (whole and not PLACEHOLDER.search(line))
                found.append(Shown(f"{where}:{number}", line, fenced, typed))
    return found


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


PARSER = build_parser()
AREAS = set(_subparsers(PARSER))
SHOWN = [c for doc in DOCS for c in _commands(doc.read_text(), doc.relative_to(ROOT).as_posix())]


def test_the_docs_show_commands() -> None:
    # A regression in the extraction would pass every test below vacuously.
    assert len(SHOWN) > 50 and sum(c.typed for c in SHOWN) > 10
    assert {c.line.split()[1] for c in SHOWN} == AREAS, "every area appears in the docs"


def _verbs_and_flags(shown: Shown) -> None:
    """Walk the areas and verbs the line names (``a|b`` alternatives each); every flag must belong to one."""
    words = shown.line.split()[1:]
    level = [PARSER]
    while words and all(_subparsers(p) for p in level) and not PLACEHOLDER.fullmatch(words[0]):
        names = words.pop(0).split("|")
        for p in level:
            unknown = [n for n in names if n not in _subparsers(p)]
            assert not unknown, f"{shown}: no command {unknown} (has {sorted(_subparsers(p))})"
        level = [_subparsers(p)[n] for p in level for n in names]
    assert not shown.fenced or all(not _subparsers(p) for p in level), f"{shown}: names no verb"
    accepted = set().union(*(_options(p) for p in level)) | _options(PARSER)
    for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(words)):
        assert flag in accepted, f"{shown}: {flag} is not an option of it (has {sorted(accepted)})"


@pytest.mark.parametrize("shown", SHOWN, ids=str)
def test_shown_command_names_real_verbs_and_flags(shown: Shown) -> None:
    _verbs_and_flags(shown)


@pytest.mark.parametrize("shown", [c for c in SHOWN if c.typed], ids=str)
def test_command_shown_as_typed_parses(shown: Shown, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        build_parser().parse_args(shlex.split(shown.line)[1:])
    except SystemExit as exc:
        pytest.fail(f"{shown}: the parser refuses it (exit {exc.code}): {capsys.readouterr().err.strip()}")


def test_make_targets_shown_exist() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    for doc in DOCS:
        for number, code, _fenced in _code_lines(doc.read_text()):
            for target in re.findall(r"(?:^\s*|[;&|]\s*|\$ )make ([\w-]+)", code):
                assert target in targets | OTHER_MAKEFILES, f"{doc.name}:{number}: make {target}: no such target"


def test_paths_named_exist() -> None:
    missing = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for path in PATH.findall(line):
                if not any(c in path for c in "<{") and not re.search(r"/[A-Z][A-Z_]+(/|$)", path):
                    if not ((ROOT / path).exists() if "*" not in path else any(ROOT.glob(path))):
                        missing.append(f"{doc.relative_to(ROOT)}:{number}: {path}")
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)


def _config_defaults() -> dict[str, Any]:
    """Every field of a job file and its default, by dotted path (``policy.<kind>`` for each kind's fields)."""
    out: dict[str, Any] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name == "kinds":
                for kind, policy in value.items():
                    walk(policy, f"{prefix}{kind.name.lower()}.")
            elif dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                out[prefix + f.name] = list(value) if isinstance(value, tuple) else value

    walk(config.DLCPConfig(), "")
    return out


def _doc_value(cell: str) -> Any:
    """A default as docs/configuration.md writes it: ``"x"``, ``[0.5]``, ``{}``, ``true``, ``1 GiB``."""
    cell = cell.strip().strip("`")
    size = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", cell)
    if size:
        return int(size[1]) << {"KiB": 10, "MiB": 20, "GiB": 30}[size[2]]
    return tomllib.loads(f"v = {cell}")["v"]


def test_configuration_table_has_every_field_with_its_default() -> None:
    rows = {}
    for line in (ROOT / "docs/configuration.md").read_text().splitlines():
        m = re.match(r"\| `([\w.<>]+)` \| ([^|]*) \|", line)
        if m:
            rows[m[1]] = _doc_value(m[2])
    expected = _config_defaults()
    kinds = [k.name.lower() for k in MessageKind]
    for name in [r for r in rows if "<kind>" in r]:  # one row for a field of every kind
        value = rows.pop(name)
        rows.update({name.replace("<kind>", k): value for k in kinds})
    assert rows.keys() == expected.keys(), (
        f"documented, not in dlcp.config: {sorted(rows.keys() - expected.keys())}; "
        f"in dlcp.config, not documented: {sorted(expected.keys() - rows.keys())}"
    )
    wrong = {k: (rows[k], v) for k, v in expected.items() if rows[k] != v or type(rows[k]) is not type(v)}
    assert not wrong, f"documented default differs from the code's (doc, code): {wrong}"


def test_readme_core_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Using the core\n.*?```python\n(.*?)```", text, re.S)
    assert block, "README.md has no 'Using the core' example"
    exec(compile(block[1], "README.md: Using the core", "exec"), {})
