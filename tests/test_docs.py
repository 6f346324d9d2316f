"""The rules live in docs/rules.md, and the code's pointers into it stay valid.

Every module of `hm/game` says in its docstring where its rules are written down, and
every anchor of docs/rules.md cited in the repository (`docs/rules.md#...`) is one the
page defines. Section numbers (§) in code are docs/rules.md's sections, so the page must
keep a heading for each one that code cites.

Links hold too: every page that a Markdown page links to, or that code cites as
`docs/<page>.md`, exists, and every anchor linked (`#anchor`, `<page>.md#anchor`) is one
its page defines, as GitHub derives anchors from headings.
"""

import ast
import dataclasses
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "docs" / "rules.md"
GAME_MODULES = sorted((REPO / "hm" / "game").glob("*.py"))
ANCHOR_CITATION = re.compile(r"docs/rules\.md#([a-z0-9-]+)")
SECTION_CITATION = re.compile(r"§(\d+(?:\.\d+)?)")


def defined_anchors() -> set[str]:
    return set(re.findall(r'<a id="([a-z0-9-]+)"></a>', RULES.read_text()))


def defined_sections() -> set[str]:
    """Section numbers with a heading: `## 10. ...` gives 10, `### 10.1 ...` gives 10.1."""
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", RULES.read_text(), flags=re.MULTILINE))


@pytest.mark.parametrize("module", GAME_MODULES, ids=lambda path: path.name)
def test_every_game_module_points_into_the_rules(module):
    docstring = ast.get_docstring(ast.parse(module.read_text()))
    assert docstring and "docs/rules.md" in docstring, f"{module.name}: its docstring does not cite docs/rules.md"
    assert "GAME_RULES" not in module.read_text(), f"{module.name} cites GAME_RULES.md, which is not in the repository"


def test_every_cited_anchor_exists():
    anchors = defined_anchors()
    sources = [*REPO.glob("hm/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("bench/**/*"), *REPO.glob("docs/*.md")]
    missing = {
        f"{path.relative_to(REPO)}: #{anchor}"
        for path in sources if path.is_file() and path.suffix in (".py", ".md")
        for anchor in ANCHOR_CITATION.findall(path.read_text())
        if anchor not in anchors
    }
    assert not missing, sorted(missing)


def test_every_section_the_engine_cites_has_a_heading():
    sections = defined_sections()
    cited = {
        f"{path.name}: §{number}"
        for path in GAME_MODULES
        for number in SECTION_CITATION.findall(path.read_text())
        if number not in sections
    }
    assert not cited, sorted(cited)


def test_the_page_covers_every_reward_term_and_channel():
    from hm.game import constants as C

    text = RULES.read_text()
    for name in C.REWARD_TERMS:
        assert f"| `{name}` |" in text, f"reward term {name} is not in the table of docs/rules.md"
    channels = [name for name in dir(C) if name.startswith("CH_")]
    for name in channels:
        assert f"`{name}`" in text, f"{name} is not in the grid table of docs/rules.md"


def test_nothing_cites_the_spec_files_outside_the_repository():
    """The rules and the scenario format are docs/rules.md and docs/scenarios.md; the
    spec files they were written from are on no user's machine."""
    sources = [REPO / "README.md", *REPO.glob("hm/**/*.py"), *REPO.glob("tests/**/*.py"),
               *REPO.glob("bench/**/*.py"), *REPO.glob("bin/*"), *REPO.glob("docs/*.md")]
    spec_files = ("GAME_RULES" + ".md", "GAME_RULES" + " §", "SCENARIO" + ".md")
    citing = sorted(str(path.relative_to(REPO)) for path in sources
                    if path.is_file() and path.resolve() != Path(__file__).resolve()
                    and any(name in path.read_text(errors="replace") for name in spec_files))
    assert not citing, citing


# Links between pages, and from code into pages.
#
# What counts as a link: in a Markdown file, the target of every inline link or image,
# `[text](target)` (relative to the file; `#anchor` alone is the file itself); in every
# file, a citation written `docs/<page>.md` or `docs/<page>.md#<anchor>` (relative to the
# repository). Every linked page must exist, and every anchor must be one its page
# defines: a heading's slug (GitHub's rule, `slug`) or an explicit `<a id="...">` /
# `<a name="...">`.

SKIPPED_DIRS = {"runs"}  # and every hidden directory (.venv, .git, .cache, ...)
MARKDOWN_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DOCS_CITATION = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?(?![\w])")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
EXPLICIT_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
# Pages that must stay as they are, and the stale page citations they hold (reported, not fixed):
# docs/rules.md is kept byte for byte, and its §20 names the journal's old home.
KNOWN_STALE = {("docs/rules.md", "docs/learning.md")}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text (no Markdown markup, no
    HTML tags, a link's text only), lower-cased; every character that is not a letter,
    a digit, a space, a hyphen or an underscore dropped; each space a hyphen."""
    text = re.sub(r"<[^>]*>", "", heading.strip())
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text).lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def page_anchors(text: str) -> set[str]:
    """Every anchor a Markdown page defines: its headings' slugs (a repeated slug gets
    -1, -2, ... in order) and its explicit `<a id>` / `<a name>` anchors. Headings
    inside fenced code blocks are not headings."""
    anchors, seen, fence = set(), {}, None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        anchors.update(EXPLICIT_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def _skipped(path: Path) -> bool:
    parts = path.relative_to(REPO).parts[:-1]
    return any(part.startswith(".") or part in SKIPPED_DIRS for part in parts)


def markdown_files() -> list[Path]:
    return sorted(path for path in REPO.rglob("*.md") if not _skipped(path))


def code_files() -> list[Path]:
    files = [path for folder in ("hm", "bin", "bench", "tests") for path in (REPO / folder).rglob("*.py")]
    files += [path for path in (REPO / "bin").iterdir() if path.is_file() and not path.suffix]
    return sorted(path for path in files if not _skipped(path) and path.resolve() != Path(__file__).resolve())


def links_in(path: Path) -> list[tuple[Path, str | None, str]]:
    """The links in one file: (the page or file linked, its anchor or None, as written)."""
    text = path.read_text(errors="replace")
    found = []
    if path.suffix == ".md":
        for target in MARKDOWN_LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto:, ...
            page, _, anchor = target.partition("#")
            found.append(((path.parent / page).resolve() if page else path.resolve(), anchor or None, target))
    for page, anchor in DOCS_CITATION.findall(text):
        found.append(((REPO / page).resolve(), anchor or None, page + (f"#{anchor}" if anchor else "")))
    return found


def broken_links(paths: list[Path]) -> list[str]:
    anchors: dict[Path, set[str]] = {}
    broken = []
    for path in paths:
        where = str(path.relative_to(REPO))
        for target, anchor, written in links_in(path):
            if not target.exists():
                if (where, written.partition("#")[0]) not in KNOWN_STALE:
                    broken.append(f"{where}: {written} (no such file)")
                continue
            if anchor is None:
                continue
            if target.suffix != ".md":
                broken.append(f"{where}: {written} (an anchor into a file that is not a Markdown page)")
                continue
            if target not in anchors:
                anchors[target] = page_anchors(target.read_text())
            if anchor not in anchors[target]:
                broken.append(f"{where}: {written} (no such anchor in {target.relative_to(REPO)})")
    return sorted(set(broken))


@pytest.mark.parametrize(("heading", "anchor"), [
    ("HackMatrix: the rules as `hm` plays them", "hackmatrix-the-rules-as-hm-plays-them"),
    ("0. Conventions", "0-conventions"),
    ("9.8 ROW and COL", "98-row-and-col"),
    ("The issue's budget: 20M env steps, and the rollout length", "the-issues-budget-20m-env-steps-and-the-rollout-length"),
    ("γ = 0.995 at the defaults to 20M (2026-11-30): lower", "γ--0995-at-the-defaults-to-20m-2026-11-30-lower"),
    ("snake_case and [a link](other.md#x) <a id=\"here\"></a>", "snake_case-and-a-link-"),
])
def test_slug_follows_githubs_rule(heading, anchor):
    assert slug(heading) == anchor


def test_slugs_of_the_rules_page():
    anchors = page_anchors(RULES.read_text())
    for heading in ("0. Conventions", "9.8 ROW and COL", "9.10 UNDO", "4. The program table"):
        assert slug(heading) in anchors, heading
    assert defined_anchors() <= anchors  # its explicit anchors count too


def test_repeated_headings_are_numbered():
    text = "# Notes\n## Setup\n```\n## Setup\n```\n## Setup\n## Setup\n"
    assert page_anchors(text) == {"notes", "setup", "setup-1", "setup-2"}


def test_every_link_between_pages_resolves():
    """Every page and anchor that a Markdown page links to exists."""
    broken = broken_links(markdown_files())
    assert not broken, "\n".join(broken)


def test_every_page_that_code_cites_exists():
    """Every `docs/<page>.md` and `docs/<page>.md#<anchor>` cited in code (hm/, bin/,
    bench/, tests/) names a page that exists and an anchor that page defines."""
    broken = broken_links(code_files())
    assert not broken, "\n".join(broken)


def test_the_config_reference_is_generated_from_the_config():
    """docs/config.md is what `python -m hm.tools.config_reference` prints: every field of
    `TrainConfig`, its default and its flag's help, and the presets."""
    from hm.tools.config_reference import render
    from hm.train.config import TrainConfig

    page = (REPO / "docs" / "config.md").read_text()
    assert page == render(), "regenerate: python -m hm.tools.config_reference > docs/config.md"
    for field in dataclasses.fields(TrainConfig):
        assert f"| `{field.name}` |" in page
