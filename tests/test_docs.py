"""The rules live in docs/rules.md, and the code's pointers into it stay valid.

Every module of `hm/game` says in its docstring where its rules are written down, and
every anchor of docs/rules.md cited in the repository (`docs/rules.md#...`) is one the
page defines. Section numbers (§) in code are docs/rules.md's sections, so the page must
keep a heading for each one that code cites.
"""

import ast
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
