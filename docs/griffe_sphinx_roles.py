"""A griffe extension for the documentation site: Sphinx markup in docstrings to Markdown.

riemfl's numpydoc docstrings use a few reStructuredText constructs that Markdown does not know.
mkdocstrings would print them verbatim (``:class:`Stiefel```), so this extension rewrites each
docstring as griffe loads it, before mkdocstrings renders it:

* ``:math:`x``` becomes ``\\(x\\)`` and a ``.. math::`` block becomes ``\\[ ... \\]``, which
  ``pymdownx.arithmatex`` (generic mode) hands to MathJax;
* a simple table (``====  ====`` borders) becomes a Markdown table, and the ``::`` that
  announces a literal block becomes ``:`` (the indented block is already Markdown code);
* a cross-reference role (``:class:``, ``:func:``, ``:meth:``, ``:attr:``, ``:data:``,
  ``:mod:``, ``:exc:``, ``:obj:``) becomes inline code of its target, ``~`` keeping only the
  last part of the name as Sphinx does (``:class:`~riemfl.Stiefel``` -> ``Stiefel``), and a
  link (an optional mkdocs-autorefs reference) where the target is a dotted name that the site
  documents under that name.

It also makes ``riemfl.adapters`` (the ``adapters/`` folder) visible to griffe.
The source files are not changed. It is loaded by ``mkdocs.yml`` (``extensions:`` of the python
handler); nothing else imports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

try:
    import griffe
except ImportError:  # docs/gen_reference.py (and its test) need only to_markdown
    griffe = None

_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_XREF_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj):`([^`]+)`")
_MATH_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<inline>.*)$")
_LITERAL_MARKER = re.compile(r"^(?![ \t]*\.\.)(?P<text>.*\S)::[ \t]*$", re.M)
_ROW_BREAK = re.compile(r"\\\\")  # a TeX line break, \\
_ALIGN_TAB = re.compile(r"(?<!\\)&")  # an alignment tab (not an escaped \&)
_TABLE_BORDER = re.compile(r"^(?P<indent>[ \t]*)=+(?: +=+)+[ \t]*$")
_Block = Callable[[list[str], int, re.Match[str]], tuple[list[str], int]]


def _rewrite_blocks(text: str, start: re.Pattern[str], block: _Block) -> str:
    """Replace each block of lines that begins with a line matching ``start``.

    ``block(lines, i, match)`` reads the block that begins at ``lines[i]`` and returns its
    replacement lines and the index of the first line after it.
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = start.match(lines[i])
        if match:
            replacement, i = block(lines, i, match)
            out += replacement
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


def _math_block(lines: list[str], i: int, match: re.Match[str]) -> tuple[list[str], int]:
    """A ``.. math::`` directive (with an indented body) to a ``\\[ ... \\]`` display block."""
    indent = match.group("indent")
    body = [match.group("inline")] if match.group("inline").strip() else []
    i += 1
    while i < len(lines) and (
        not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
    ):
        body.append(lines[i].strip())
        i += 1
    formula = [line for line in body if line]
    joined = "\n".join(formula)
    if (_ROW_BREAK.search(joined) or _ALIGN_TAB.search(joined)) and "\\begin{" not in joined:
        # several aligned lines: Sphinx's MathJax output wraps them in an environment (split),
        # without which MathJax reports a "Misplaced &"; aligned also takes `&&` columns
        formula = ["\\begin{aligned}", *formula, "\\end{aligned}"]
    # arithmatex finds a display block only where \\[ starts the line once Markdown has removed
    # the indentation of the list item it belongs to (4 spaces a level); a block indented by
    # 2 or 3 spaces (under "* item" or "1. item") is in no list item, so it goes to the left
    indent = indent[: len(indent) - len(indent) % 4]
    out = [indent + "\\[", *(indent + line for line in formula), indent + "\\]"]
    return out + ([""] if i < len(lines) else []), i


def _table_row(line: str, starts: list[int]) -> list[str]:
    bounds = [*starts[1:], None]
    return [line[a:b].strip() if len(line) > a else "" for a, b in zip(starts, bounds, strict=True)]


def _simple_table(lines: list[str], i: int, match: re.Match[str]) -> tuple[list[str], int]:
    """A reStructuredText simple table (``====  ====`` borders) to a Markdown pipe table.

    A row whose first cell is empty continues the row above it, as in reStructuredText.
    """
    starts = [m.start() for m in re.finditer(r"=+", lines[i])]
    groups: list[list[list[str]]] = [[]]
    i += 1
    while i < len(lines):
        if _TABLE_BORDER.match(lines[i]):
            i += 1
            if i >= len(lines) or not lines[i].strip():
                break  # the closing border
            groups.append([])
            continue
        if lines[i].strip():
            cells = _table_row(lines[i], starts)
            if not cells[0] and groups[-1]:
                previous = groups[-1][-1]
                groups[-1][-1] = [f"{p} {c}".strip() for p, c in zip(previous, cells, strict=True)]
            else:
                groups[-1].append(cells)
        i += 1
    header = groups[0] if len(groups) > 1 else [[""] * len(starts)]
    body = [row for group in groups[1:] or groups for row in group]
    rows = [*header[:1], ["---"] * len(starts), *body]
    indent = match.group("indent")
    return [indent + "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows], i


def _xref(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    explicit = re.fullmatch(r"(.+?)\s*<([^>]+)>", target)
    if explicit:  # :class:`text <target>`
        title, target = explicit.group(1), explicit.group(2)
    else:
        target = target.removeprefix("~")
        title = target.rsplit(".", 1)[-1] if match.group(1).strip().startswith("~") else target
    if "." not in target:  # a name relative to the docstring's module: no link
        return f"`{title}`"
    # mkdocs-autorefs links it where the site documents that identifier; `optional`: else
    # (a re-exported name, another library's object) plain code, without a warning
    return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'


def to_markdown(text: str) -> str:
    """A docstring with its Sphinx roles and math directives rewritten for Markdown."""
    text = _rewrite_blocks(text, _MATH_DIRECTIVE, _math_block)
    text = _rewrite_blocks(text, _TABLE_BORDER, _simple_table)
    text = _LITERAL_MARKER.sub(lambda m: m.group("text") + ":", text)
    # on one line: a continuation line of the formula that starts with "+ " or "1. " would
    # otherwise open a Markdown list item and cut the \( \) span in two (raw TeX on the page)
    text = _MATH_ROLE.sub(lambda m: "\\(" + " ".join(m.group(1).split()) + "\\)", text)
    return _XREF_ROLE.sub(_xref, text)


if griffe is not None:

    class SphinxRoles(griffe.Extension):
        """Rewrite every docstring with ``to_markdown`` as it is loaded."""

        def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = to_markdown(obj.docstring.value)

    class AdaptersPackage(griffe.Extension):
        """Load the ``adapters/`` folder as ``riemfl.adapters``, as the installed package has it.

        ``pyproject.toml`` maps ``riemfl.adapters`` to ``adapters/`` (``package-dir``), which
        griffe, reading ``riemfl/`` from the source tree, cannot know. Once ``riemfl`` is loaded,
        this loads ``adapters`` (found on the handler's ``paths``) and makes it ``riemfl``'s
        member; it stays in the collection under ``adapters`` too, where the targets of its
        relative imports point.
        """

        def on_package(
            self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any
        ) -> None:
            if pkg.name != "riemfl" or "adapters" in pkg.members:
                return
            adapters = loader.load("adapters", try_relative_path=False)
            pkg.set_member("adapters", adapters)
