"""The code and the reference docs say what is; history lives in CHANGELOG.md.

Scans bindscope/, tests/, benchmarks/, docs/ and README.md (not CHANGELOG.md, not this file) for

- references to tracker items: a hash sign and a number standing alone in prose (not a hex colour in quotes,
  not a ``noqa`` comment, not a markdown heading), the word for a tracker item or a merge request followed by a
  number;
- periods of work: an ordinal or a number with the word for a working period, and in markdown the writer's own
  period ("this ..." and the like);
- dated section headings (a markdown heading holding a date), and any ISO date in a markdown page.

Upstream bug trackers are cited by URL, which none of the patterns matches. The words the patterns look for and
every example below are assembled at run time, so this file holds none of the references it looks for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ["bindscope", "tests", "benchmarks", "docs", "README.md"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".cfg", ".rst"}
SKIPPED = {ROOT / "CHANGELOG.md", Path(__file__).resolve()}

_I, _S, _R = "iss" + "ue", "sess" + "ion", "rou" + "nd"  # assembled: the file itself names no reference
_P = "pu" + "ll"
_ORDINAL = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)"
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_NOT_TRIP = r"(?![\s-]*(?:trip|robin|id)\b)"  # the word followed by "trip" or "-robin" is no period of work
_ISO_DATE = r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"

PATTERNS = {
    # '#' + digits, standing alone: after the start of the line, whitespace or an opening bracket/punctuation;
    # not followed by a word character or '-', so "#404040"-style colours in quotes and "#4878a8" never match.
    "tracker reference (hash and number)": re.compile(r"(?:^|(?<=[\s(\[{,;:]))#\d{1,5}(?![\w-])"),
    "tracker reference (word and number)": re.compile(rf"\b{_I}s?[\s-]+(?:no\.?\s*)?#?\d+\b", re.IGNORECASE),
    "merge request reference": re.compile(rf"\b{_P}[\s-]+requests?\s+#?\d+\b", re.IGNORECASE),
    "period of work (ordinal)": re.compile(rf"\b{_ORDINAL}[\s-]+(?:{_S}|{_R})s?\b{_NOT_TRIP}", re.IGNORECASE),
    "period of work (numbered)": re.compile(rf"\b{_S}s?\s+#?\d+\b", re.IGNORECASE),
}
MARKDOWN_PATTERNS = {  # in code, a period named so is a Blender one
    "period of work (the writer's)": re.compile(rf"\b(?:this|last|previous|next|earlier|later)\s+(?:{_S}|{_R})s?"
                                                rf"\b{_NOT_TRIP}", re.IGNORECASE),
    "dated section heading": re.compile(rf"^#{{1,6}}\s.*(?:{_ISO_DATE}|\b{_MONTH}\s+\d{{4}}\b)"),
    "date of work": re.compile(_ISO_DATE),
}


def _files():
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in candidates:
            if file.suffix in SUFFIXES and file.resolve() not in SKIPPED and ".venv" not in file.parts:
                yield file


def hits(text: str, markdown: bool) -> list[tuple[int, str, str]]:
    """``(line number, pattern name, matched text)`` for every history reference in ``text``."""
    patterns = {**PATTERNS, **(MARKDOWN_PATTERNS if markdown else {})}
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name, pattern in patterns.items():
            found.extend((number, name, match.group(0)) for match in pattern.finditer(line))
    return found


def scan() -> list[str]:
    """``file:line: what (matched text)`` for every hit in the scanned tree."""
    report = []
    for file in _files():
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, name, matched in hits(text, file.suffix == ".md"):
            report.append(f"{file.relative_to(ROOT)}:{number}: {name} ({matched!r})")
    return report


def test_no_history_references_outside_the_changelog():
    report = scan()
    assert not report, ("history belongs in CHANGELOG.md; state what the code does now:\n  "
                        + "\n  ".join(report))


PLANTED = [
    f"The full attack matrix of {_I} 17: every bad input.",
    f"Targets ({_I} 3): masks under 10 % extra",
    f"and the {_I}-6 targets: probes",
    "open_clip only warns (open_clip " + "#" + "771).",
    f"published numbers change (ARO {_I}s " + "#" + "9, " + "#" + "33)",
    "#" + "27 made this faster",
    f"see {_P} request " + "12",
    "### What limits it (fou" + f"rth {_S})",
    "Measured in the eig" + f"hth {_R} of work",
    f"the runs are {_S} 4's and {_S} 6's",
    "new th" + f"is {_S}; the same width",
]


@pytest.mark.parametrize("line", PLANTED)
def test_a_planted_reference_is_found(line):
    assert hits(line, markdown=True), line


@pytest.mark.parametrize("line", [
    'facecolor="#404040"', 'OUTLINE_COLOURS = ["#e6194b", "#3cb44b"]', '  white: {c: "#eeeeee", r: 0.45}',
    "color=\"#4878a8\")", "import os  # noqa: F401", "## Throughput", "### 2. Read it, also with PyTorch",
    "#: Version of the MADMAN generator recorded in every manifest.", f"x = {_R}(value, 2)  # {_R} half even",
    f"One BlenderS{_S[1:]} per process keeps one Blender {_S} alive", f"@pytest.fixture(scope=\"{_S}\")",
    "see https://github.com/mlfoundations/open_clip/" + _I + "s/771", f"the first {_R} trip through the file",
    "generator.version '6'", "COCO 2017 val, 80 categories", "--holdout 7:colour=red",
    f"the {_S}'s build number", f"One cache folder per test {_S}",
])
def test_legitimate_text_is_not_a_reference(line):
    assert hits(line, markdown=True) == [], line


def test_the_word_in_code_names_a_blender_one():
    assert hits("RuntimeError: ``layout`` is not the scene th" + f"is {_S} built last", markdown=False) == []
