"""Every citation resolves inside the repository.

Code, docstrings, docs and generated report text cite papers by short keys ("Zhang et al. 2024,
Alg. 1 line 17", "Licudi et al. 2025, eq. (12)") listed in ``docs/references.md``; they never
cite a document the repository does not contain (private reading notes, design notes, a copy of a
paper on someone's disk). Two checks:

* no tracked text file under ``riemfl``, ``adapters``, ``docs``, ``benchmarks``, ``tests`` or
  ``README.md`` refers to such a document (the patterns below);
* every author-year key used in ``docs/`` is listed in ``docs/references.md``.

"digest" alone is allowed: ``riemfl.federated.fingerprint.data_digest`` and the checkpoint format
use the word for a SHA-256 hash. Only its citation forms ("digest-004", "digest section 7.1",
"digest 5.2", "the digest's prototypes", ...) are refused.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("riemfl", "adapters", "docs", "benchmarks", "tests", "README.md")
SUFFIXES = {
    ".py",
    ".md",
    ".rst",
    ".txt",
    ".toml",
    ".cfg",
    ".ini",
    ".yaml",
    ".yml",
    ".json",
    ".cpp",
    ".h",
    ".sh",
}
THIS_FILE = "tests/test_citations.py"

#: References to documents outside the repository, and the tags of the private notes.
FORBIDDEN = {
    "a note ('digest')": re.compile(
        r"digest(?:-\s*\d|\s+\d+\.\d|\s+[A-C]\.\d|'s\b"
        r"|s?\s+(?:section|sec\.|§|item|items|eq\.|eqs\.|part|table|appendix)\b"
        r"|s?\s+in\s+`?shared)",
        re.IGNORECASE,
    ),
    "a note tag ('[OUTSIDE]')": re.compile(r"\[OUTSIDE\]", re.IGNORECASE),
    "a note tag ('[P]', '[TR]')": re.compile(r"(?<![\w\])])\[(?:P|TR)(?:\]|\s+eqs?\.)"),
    "a note tag ('[DOC]', '[CHOICE]', ...)": re.compile(
        r"\[(?:DOC|STD|CHOICE|PROTO|derived|external)\]"
    ),
    "'DESIGN.md'": re.compile(r"DESIGN\.md", re.IGNORECASE),
    "'anchors.md'": re.compile(r"anchors\.md", re.IGNORECASE),
    "'style-models'": re.compile(r"style-models", re.IGNORECASE),
    "'seeds/'": re.compile(r"\bseeds/", re.IGNORECASE),
    "'shared/notes'": re.compile(r"shared/notes", re.IGNORECASE),
    "a seed number ('seed 002')": re.compile(r"\bseeds?\s+00[0-9]\b", re.IGNORECASE),
    "riemfl's issue tracker ('issue 17')": re.compile(
        r"(?<!geoopt )(?<!pymanopt )\bissues?\s+#?\d+\b", re.IGNORECASE
    ),
}

# ------------------------------------------------------------------------------ author-year keys
_NAME = r"[A-Z][A-Za-zÀ-ÿ'\-]*[a-zà-ÿ]"  # ends in a lower-case letter: not "NeurIPS", "ICML"
_KEY = re.compile(
    rf"\b({_NAME})(?:(?:, {_NAME})*,? (?:and|&) {_NAME}| et al\.)?,? \(?((?:19|20)\d\d)\b(?![-\d])"
)
_NOT_AUTHORS = {"Results", "MLSys", "Confidentiality", "Workshop", "Proceedings", "Fig", "Table"}


def _fold(name: str) -> str:
    return unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()


def author_year_keys(text: str) -> set[tuple[str, str]]:
    """(first author, year) of every author-year citation in ``text``."""
    return {(m[1], m[2]) for m in _KEY.finditer(text) if m[1] not in _NOT_AUTHORS}


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", *SCANNED], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the folders
        files = []
        for top in SCANNED:
            path = ROOT / top
            paths = [path] if path.is_file() else path.rglob("*")
            files += [str(p.relative_to(ROOT)) for p in paths if p.is_file()]
    return sorted(f for f in files if Path(f).suffix in SUFFIXES and (ROOT / f).is_file())


def _hits() -> dict[str, list[str]]:
    """{file: ["line: what it refers to: the text"]} over the scanned tracked files."""
    found: dict[str, list[str]] = {}
    for name in _tracked_files():
        if name == THIS_FILE:
            continue
        lines = (ROOT / name).read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            # a citation broken over two lines ("... digest\n    section 3") is seen on its first
            following = lines[number].lstrip(" #*") if number < len(lines) else ""
            joined = f"{line} {following}"
            for what, pattern in FORBIDDEN.items():
                if any(m.start() < len(line) for m in pattern.finditer(joined)):
                    found.setdefault(name, []).append(f"{number}: {what}: {line.strip()[:120]}")
    return found


def test_the_patterns_tell_citations_from_hashes():
    cites = [
        "digest-004 section 7.1",
        "(digest 5.2, P1)",
        "digest section 3.3",
        "digest B.10",
        "the digest's prototypes",
        "digest item 9.6",
        "[P] eq. 10",
        "([TR] section 4)",
        "[P eq.48]",
        "[OUTSIDE]",
        "seed 002",
        "[derived]",
        "shared/notes/anchors.md",
        "digest 1.12",
        "Settings (digest-002-003 B.6, B.11;",
    ]
    hashes = [
        "a SHA-256 digest of everything",
        "data_digest(problem)",
        "digest.update(part)",
        "hexdigest()",
        "the digest of the same trainer",
        "(magic line, digest, header length",
        '("digest", magic + 32)',
        "a digest of the clients' data",
        "x[P] + y[TR]",
        "digest                    32 bytes: SHA-256",
        'b"riemfl data digest 1\\n"',
    ]
    for text in cites:
        assert any(p.search(text) for p in FORBIDDEN.values()), text
    for text in hashes:
        assert not any(p.search(text) for p in FORBIDDEN.values()), text
    assert author_year_keys("(Zhang et al. 2024, Alg. 1) and Li and Ma (2022)") == {
        ("Zhang", "2024"),
        ("Li", "2022"),
    }
    assert author_year_keys("Edelman, Arias and Smith 1998; Toghani & Uribe 2022") == {
        ("Edelman", "1998"),
        ("Toghani", "2022"),
    }
    assert author_year_keys("NeurIPS 2024, ICML 2008, Results (2026-11-22, VM") == set()


def test_no_citation_of_a_document_outside_the_repository():
    hits = _hits()
    assert not hits, "citations of documents the repository does not contain:\n" + "\n".join(
        f"{name}:{line}" for name, lines in sorted(hits.items()) for line in lines
    )


def test_every_author_year_key_in_the_docs_is_in_the_references():
    references = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    listed = set()
    for line in references.splitlines():
        if line.startswith("| ") and not line.startswith("| key"):
            listed |= {(_fold(a), y) for a, y in author_year_keys(line.split("|")[1])}
    assert listed, "docs/references.md lists no key"
    missing = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if path.name == "references.md":
            continue
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))  # keys broken over lines
        for author, year in author_year_keys(text):
            if (_fold(author), year) not in listed:
                missing.append(f"{path.relative_to(ROOT)}: {author} ... {year}")
    assert not missing, "cited in docs/ but not in docs/references.md:\n" + "\n".join(missing)


def test_the_references_page_is_linked():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/references.md)" in readme
    for index in ("docs/federated/index.md", "docs/federated/async/index.md"):
        assert "references.md)" in (ROOT / index).read_text(encoding="utf-8"), index
