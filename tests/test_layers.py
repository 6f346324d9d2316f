"""The layers of docs/design.md: no module imports from a layer above its own."""

import ast
from pathlib import Path

import pytest

HM = Path(__file__).resolve().parents[1] / "hm"
# Each layer may import the ones before it (and itself).
LAYERS = [("hm.game",), ("hm.env", "hm.gym", "hm.viz"), ("hm.players", "hm.search"), ("hm.train",),
          ("hm.tools", "hm.command", "hm.viz")]


def layer_of(module: str) -> int | None:
    for index, names in enumerate(LAYERS):
        if any(module == name or module.startswith(name + ".") for name in names):
            return index
    return None


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in out if name.startswith("hm")}


@pytest.mark.parametrize("path", sorted(HM.rglob("*.py")), ids=lambda p: str(p.relative_to(HM)))
def test_no_module_imports_from_a_layer_above(path):
    module = ".".join(("hm", *path.relative_to(HM).with_suffix("").parts)).removesuffix(".__init__")
    own = layer_of(module)
    if own is None:
        return
    above = sorted(name for name in imports(path) if (layer_of(name) or 0) > own)
    assert not above, f"{module} (layer {own}) imports {above} from a layer above"
