"""The documentation cannot rot: its links resolve and its command lines parse.

For README.md, docs/*.md and examples/README.md:

- every relative link ``[text](target)`` leads to a file or directory of the checkout,
  and a ``#anchor`` (in this page or a linked ``.md`` page) to one of its headings, slugged
  as GitHub slugs them;
- every ``flow-runner ...`` (or ``.venv/bin/flow-runner ...``, or the runner image
  ``flow-runner:TAG ...``) command line shown in a shell code block, or in an inline code
  span, names a command that exists, and each ``--option`` / ``-o`` it shows exists for
  that command. The lines are parsed against the real typer app's click tree, never run.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import click
import pytest
import typer.main

from runner.cli.app import app

pytestmark = pytest.mark.timeout(60)  # it reads a dozen pages and parses: under a second

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "examples" / "README.md", *(ROOT / "docs").glob("*.md")])
SHELL_LANGUAGES = frozenset({"", "sh", "bash", "shell", "console"})
IMPLICIT_SUBCOMMAND = {"batch": "run"}
"""Groups that take a first argument that is not one of their commands as the argument
of this one: ``batch MANIFEST`` is ``batch run MANIFEST`` (runner.cli.app's _BatchGroup)."""
SEPARATORS = frozenset({"&&", "||", "|", ";", ">", ">>", "<", "2>", "2>&1"})
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
ENTRY = re.compile(r"(?:^|/)flow-runner(?::[\w.-]+)?$")


class Line(NamedTuple):
    page: Path
    number: int
    text: str

    def __str__(self) -> str:
        shown = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{shown}:{self.number}: {self.text.strip()}"


def _split(page: Path) -> tuple[list[Line], list[tuple[str, list[Line]]]]:
    """The page's prose lines and its code blocks (language, lines): fenced ones, and
    indented ones (four spaces after a blank line), whose language is unsaid."""
    prose: list[Line] = []
    blocks: list[tuple[str, list[Line]]] = []
    fence: str | None = None
    indented = False
    previous = ""
    for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        opened = FENCE.match(text)
        stripped = text.strip()
        if fence is None and opened:
            fence = opened.group(2)
            blocks.append((opened.group(3).lower(), []))
        elif fence is not None and stripped.startswith(fence) and not stripped[len(fence) :]:
            fence = None
        elif fence is not None:
            blocks[-1][1].append(Line(page, number, text))
        elif text.startswith("    ") and (indented or not previous.strip()):
            if not indented:
                blocks.append(("", []))
            indented = True
            blocks[-1][1].append(Line(page, number, text))
        else:
            indented = indented and not stripped
            prose.append(Line(page, number, text))
        previous = text
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    """Every heading's anchor on ``page``; a repeated one gets ``-1``, ``-2``, ..."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    prose, _ = _split(page)
    for line in prose:
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line.text)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    """What is wrong with the page's relative links, one message each."""
    problems: list[str] = []
    prose, _ = _split(page)
    for line in prose:
        for target in LINK.findall(CODE_SPAN.sub("", line.text)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            path = (page.parent / path_part).resolve() if path_part else page
            if not path.exists():
                problems.append(f"{line}: {target!r} leads to no file ({path})")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                problems.append(f"{line}: {target!r}: no heading #{anchor} in {path.name}")
    return problems


def command_lines(page: Path) -> Iterator[tuple[Line, list[str]]]:
    """Every ``flow-runner`` command line shown on the page, as its words after the
    program name: from shell code blocks (continuation lines joined, comments and what
    follows a shell separator dropped) and from inline code spans."""
    prose, blocks = _split(page)
    shown: list[tuple[Line, str]] = []
    for language, lines in blocks:
        if language not in SHELL_LANGUAGES:
            continue
        pending: list[Line] = []
        for line in lines:
            pending.append(line)
            if not line.text.rstrip().endswith("\\"):
                joined = " ".join(part.text.rstrip().rstrip("\\") for part in pending)
                shown.append((pending[0], joined))
                pending = []
    for line in prose:
        shown.extend((line, span) for _, span in CODE_SPAN.findall(line.text))
    for line, text in shown:
        try:
            words = shlex.split(text, comments=True)
        except ValueError:  # an inline span that is no shell line, e.g. an unpaired quote
            continue
        command: list[str] | None = None
        for word in words:
            if command is None:
                if ENTRY.search(word):
                    command = []
            elif word in SEPARATORS or word.endswith(";"):
                yield line, command
                command = None
            else:
                command.append(word)
        if command is not None:
            yield line, command


@functools.cache
def _root() -> click.Command:
    """The app's click command, built once: its commands are built as they are looked up."""
    return typer.main.get_command(app)


def parse_problem(words: list[str]) -> str | None:
    """Why ``flow-runner WORDS`` does not parse against the app, or None: the command path
    must exist and every option shown must be one of that command's. Placeholders in
    brackets (``[--quiet]``) are read as the option they hold, ``...`` as any words; after
    a lone ``--`` the words are the component's command."""
    command = _root()
    context = click.Context(command, info_name="flow-runner")
    path = ["flow-runner"]
    at_group = True
    for raw in words:
        word = raw.strip("[]")
        if word == "--":
            break
        if word.strip(".") == "":  # `flow-runner ...`: a placeholder for any command
            return None
        if isinstance(command, click.Group) and at_group and not word.startswith("-"):
            found = command.get_command(context, word)
            if found is None and path[-1] in IMPLICIT_SUBCOMMAND:
                found = command.get_command(context, IMPLICIT_SUBCOMMAND[path[-1]])
                at_group = False  # the word is that command's argument
            if found is None:
                return f"{' '.join(path)} has no command {word!r}"
            command = found
            path.append(found.name or word)
            context = click.Context(command, info_name=word, parent=context)
            continue
        at_group = False
        if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d.*", word):
            continue  # an argument or an option's value
        name = word.split("=", 1)[0]
        known = {opt for param in command.get_params(context) for opt in param.opts}
        known |= {opt for param in command.get_params(context) for opt in param.secondary_opts}
        if name not in known:
            return f"{' '.join(path)} has no option {name!r}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_line_shown_parses(page: Path) -> None:
    problems = [
        f"{line}: {problem}"
        for line, words in command_lines(page)
        if (problem := parse_problem(words)) is not None
    ]
    assert problems == []


def test_the_pages_show_command_lines_and_are_all_linked_from_the_readme() -> None:
    shown = {page.name: sum(1 for _ in command_lines(page)) for page in PAGES}
    assert shown["README.md"] >= 5
    readme, _ = _split(ROOT / "README.md")
    linked = {(ROOT / target).resolve() for line in readme for target in LINK.findall(line.text)}
    assert [page for page in PAGES if page not in linked and page != ROOT / "README.md"] == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("exec IMAGE --input '{}' -q", None),
        ("batch cases.jsonl --jobs 2", None),
        ("batch report store.sqlite --json", None),
        ("exec IMAGE -- python3 --anything", None),
        ("exec IMAGE --made-up 3", "flow-runner exec has no option '--made-up'"),
        ("batch diff --results s", "flow-runner batch diff has no option '--results'"),
        ("daemon start --made-up", "flow-runner daemon start has no option '--made-up'"),
        ("frobnicate", "flow-runner has no command 'frobnicate'"),
    ],
)
def test_the_checker_refuses_what_does_not_parse(line: str, problem: str | None) -> None:
    assert parse_problem(shlex.split(line)) == problem


def test_the_checker_finds_links_that_lead_nowhere(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere) `[not](x)`\n")
    problems = broken_links(page)
    assert len(problems) == 2
    assert "missing.md" in problems[0] and "#nowhere" in problems[1]
