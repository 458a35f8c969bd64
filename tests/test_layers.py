"""Imports point one way: the layer table in docs/architecture.md, checked on every import.

The table (the ```layers block of docs/architecture.md) lists the layers from the top down; on
each line ``|`` separates units that must not import each other and spaces join the modules of
one unit. A module may import its own unit and any unit on a lower line: never a unit above it,
nor a sibling on its own line. The standalone packages have their own rules: ``rewards`` never
imports torch, ``pipeline`` or ``evals``; ``sandbox`` imports none of ``rewards``, ``pipeline``,
``evals`` or torch; nothing shipped imports ``pytest`` or ``tests``.

Every ``import`` statement counts, including the ones inside functions (most heavy imports here
are lazy, and a lazy upward import is still an upward dependency). The walk uses ``ast`` only, so
it needs nothing installed and also runs on another checkout:

    python tests/test_layers.py /path/to/other/checkout    # prints its violations, exit 1 if any
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "evals", "rewards", "sandbox")
STANDALONE = {  # package -> top-level names it must never import
    "rewards": {"torch", "pipeline", "evals", "pytest", "tests"},
    "sandbox": {"torch", "pipeline", "evals", "rewards", "pytest", "tests"},
}
NEVER_SHIPPED = {"pytest", "tests", "hypothesis"}  # test-only code stays out of the packages


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. pipeline.rollout.hf_engine
    target: str  # the imported module, e.g. pipeline.parallel.fsdp
    where: str  # file:line


def read_layers(doc: Path) -> list[list[tuple[str, ...]]]:
    """The ```layers block: per layer (top first), its units, each a tuple of module prefixes."""
    match = re.search(r"^```layers\n(.*?)^```", doc.read_text(), re.S | re.M)
    assert match, f"{doc} has no ```layers block"
    layers = []
    for line in match.group(1).splitlines():
        if line.strip():
            _, _, spec = line.partition(":")
            layers.append([tuple(unit.split()) for unit in spec.split("|")])
    return layers


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(root: Path, module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """Absolute names ``from ... import ...`` brings in: ``pkg.name`` when that is a module."""
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    names = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        as_path = root / Path(*sub.split("."))
        names.append(sub if as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file() else base)
    return names


def find_imports(root: Path) -> list[Import]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(root, path)
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    targets = _resolve(root, module, path.name == "__init__.py", node)
                else:
                    continue
                where = f"{path.relative_to(root)}:{node.lineno}"
                found += [Import(module, t, where) for t in targets]
    return found


def _unit_of(name: str, units: dict[tuple[str, ...], int]) -> tuple[str, ...] | None:
    best, best_len = None, -1
    for unit in units:
        for prefix in unit:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = unit, len(prefix)
    return best


def violations(root: Path, layers: list[list[tuple[str, ...]]]) -> list[str]:
    """One line per import that breaks a rule (empty: the tree is layered as the table says)."""
    level = {unit: i for i, layer in enumerate(layers) for unit in layer}
    out = []
    for package in ("pipeline", "evals"):  # every module must have a place in the table
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(root, path)
            if name != "pipeline" and _unit_of(name, level) is None:
                out.append(f"{path.relative_to(root)}: module {name} is in no layer of the table")
    for imp in find_imports(root):
        top, target_top = imp.module.split(".")[0], imp.target.split(".")[0]
        if target_top in STANDALONE.get(top, set()) or target_top in NEVER_SHIPPED:
            out.append(f"{imp.where}: {imp.module} imports {imp.target} ({top} must never import {target_top})")
            continue
        if imp.module == "pipeline":  # the package root holds no code, only its docstring
            out.append(f"{imp.where}: the package root pipeline imports {imp.target}")
            continue
        src, dst = _unit_of(imp.module, level), _unit_of(imp.target, level)
        if src is None or dst is None or src == dst:
            continue  # outside the table (stdlib, third party, rewards, sandbox) or within one unit
        if level[dst] < level[src]:
            out.append(f"{imp.where}: {imp.module} imports {imp.target}, a layer above it ({' '.join(dst)})")
        elif level[dst] == level[src]:
            out.append(f"{imp.where}: {imp.module} imports {imp.target}, its sibling ({' '.join(dst)}) in one layer")
    return out


def test_imports_follow_the_layer_table():
    found = violations(ROOT, read_layers(ROOT / "docs" / "architecture.md"))
    assert not found, "upward or sideways imports:\n" + "\n".join(found)


def test_the_check_catches_upward_sideways_and_forbidden_imports(tmp_path):
    """The checker itself: a small tree with one import of each kind it must refuse."""
    files = {
        "pipeline/__init__.py": "",
        "pipeline/low.py": "def f():\n    from pipeline.high import g\n",  # lazy, still upward
        "pipeline/high.py": "from pipeline import low\nfrom .side import x\n",  # down: fine; sideways
        "pipeline/side.py": "x = 1\n",
        "pipeline/stray.py": "",  # in no layer
        "evals/__init__.py": "",
        "rewards/__init__.py": "import torch\n",
        "sandbox/__init__.py": "from rewards import check\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    layers = [[("pipeline.high",), ("pipeline.side",)], [("pipeline.low", "evals")]]
    found = violations(tmp_path, layers)
    assert len(found) == 5, found
    expected = ["pipeline.low imports pipeline.high, a layer above", "pipeline.high imports pipeline.side, its sibling",
                "module pipeline.stray is in no layer", "rewards must never import torch",
                "sandbox must never import rewards"]
    for fragment in expected:
        assert any(fragment in line for line in found), (fragment, found)


def test_standalone_packages_load_without_torch():
    """The rule on the import graph as Python sees it (third-party imports included)."""
    code = ("import sys, rewards, sandbox, rewards.registry, rewards.code\n"
            "bad = sorted(m for m in ('torch', 'pipeline', 'evals', 'transformers') if m in sys.modules)\n"
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


if __name__ == "__main__":
    tree = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    problems = violations(tree, read_layers(ROOT / "docs" / "architecture.md"))
    print("\n".join(problems) or "no violations")
    sys.exit(1 if problems else 0)
