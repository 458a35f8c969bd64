"""Imports point one way: the layer tables in docs/architecture.md, checked on every import.

A table is a ```layers block of docs/architecture.md; the words after ``layers`` name the packages
it covers (every module of them must have a place in it). It lists the layers from the top down;
on each line ``|`` separates units that must not import each other and spaces join the modules of
one unit. A module may import its own unit and any unit on a lower line: never a unit above it,
nor a sibling on its own line. A package root is named ``<package>.__init__`` there. The modules
of the ```pure block import nothing else of their own package. The standalone packages have
their own rules: ``rewards`` never imports torch, ``pipeline`` or ``evals``; ``sandbox`` imports
none of ``rewards``, ``pipeline``, ``evals`` or torch; nothing shipped imports ``pytest`` or
``tests``.

Every import counts, including the ones inside functions (most heavy imports here are lazy, and
a lazy upward import is still an upward dependency), and ``importlib.import_module("x")`` /
``__import__("x")`` with a literal name count as imports of ``x``. A dynamic import of a name
computed at run time is refused: the check cannot see where it points. The one exception,
``DYNAMIC_IMPORTS``, loads functions the user names in the config. The walk uses ``ast`` only, so
it needs nothing installed and also runs on another checkout:

    python tests/test_layers.py /path/to/other/checkout    # prints its violations, exit 1 if any
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("pipeline", "evals", "rewards", "sandbox")
STANDALONE = {  # package -> top-level names it must never import
    "rewards": {"torch", "pipeline", "evals", "pytest", "tests"},
    "sandbox": {"torch", "pipeline", "evals", "rewards", "pytest", "tests"},
}
NEVER_SHIPPED = {"pytest", "tests", "hypothesis"}  # test-only code stays out of the packages
CODELESS_ROOTS = {"pipeline"}  # package roots that hold only their docstring
DYNAMIC_IMPORTS = {  # (module, function) -> why it may import a name computed at run time
    ("rewards.registry", "_import_reward"): "reward.weights names user functions as package.module:function",
}

Layers = list[list[tuple[str, ...]]]  # per layer (top first), its units, each a tuple of module prefixes


@dataclass(frozen=True)
class Table:
    packages: tuple[str, ...]  # every module of these packages has a place in the table
    layers: Layers


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. pipeline.rollout.hf_engine
    target: str | None  # the imported module, e.g. pipeline.parallel.fsdp; None: a name computed at run time
    where: str  # file:line
    function: str = ""  # the enclosing function's qualified name ("" at module level)


def _blocks(doc: Path, kind: str) -> list[tuple[str, str]]:
    """(the words after the kind, the body) of every ```<kind> block."""
    return re.findall(rf"^```{kind}\b([^\n]*)\n(.*?)^```", doc.read_text(), re.S | re.M)


def parse_layers(body: str) -> Layers:
    layers = []
    for line in body.splitlines():
        if line.strip():
            _, _, spec = line.partition(":")
            layers.append([tuple(unit.split()) for unit in spec.split("|")])
    return layers


def read_tables(doc: Path) -> list[Table]:
    """Every ```layers block: the packages it names and its layers."""
    tables = [Table(tuple(words.split()), parse_layers(body)) for words, body in _blocks(doc, "layers")]
    assert tables and all(t.packages for t in tables), f"{doc}: every ```layers block names its packages"
    return tables


def read_pure(doc: Path) -> list[str]:
    """The ```pure block: modules that import nothing else of their own package."""
    return [line.split("#")[0].strip() for _, body in _blocks(doc, "pure") for line in body.splitlines()
            if line.split("#")[0].strip()]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(root: Path, name: str) -> bool:
    as_path = root / Path(*name.split("."))
    return as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file()


def _resolve(root: Path, module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """Absolute names ``from ... import ...`` brings in: ``pkg.name`` when that is a module."""
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if _is_module(root, f"{base}.{a.name}") else base for a in node.names]


def _dynamic_target(node: ast.Call) -> tuple[bool, str | None]:
    """(is it a dynamic import, its literal absolute name or None)."""
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module"
             and isinstance(func.value, ast.Name) and func.value.id == "importlib") \
        or (isinstance(func, ast.Name) and func.id in ("import_module", "__import__"))
    if not named:
        return False, None
    arg = node.args[0] if node.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
        return True, arg.value
    return True, None  # a computed or relative name


class _ImportWalk(ast.NodeVisitor):
    def __init__(self, root: Path, path: Path, module: str):
        self.root, self.path, self.module, self.stack, self.found = root, path, module, [], []

    def _add(self, node: ast.AST, targets: list[str | None]) -> None:
        where = f"{self.path.relative_to(self.root)}:{node.lineno}"
        self.found += [Import(self.module, t, where, ".".join(self.stack)) for t in targets]

    def _scope(self, node) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Import(self, node: ast.Import) -> None:
        self._add(node, [alias.name for alias in node.names])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._add(node, _resolve(self.root, self.module, self.path.name == "__init__.py", node))

    def visit_Call(self, node: ast.Call) -> None:
        dynamic, target = _dynamic_target(node)
        if dynamic:
            self._add(node, [target])
        self.generic_visit(node)


def find_imports(root: Path) -> list[Import]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            walk = _ImportWalk(root, path, module_name(root, path))
            walk.visit(ast.parse(path.read_text(), filename=str(path)))
            found += walk.found
    return found


def _unit_of(name: str, units) -> tuple[str, ...] | None:
    """The unit whose longest prefix matches ``name`` (a package root also as ``<root>.__init__``)."""
    best, best_len = None, -1
    for candidate in (name, f"{name}.__init__") if "." not in name else (name,):
        for unit in units:
            for prefix in unit:
                if (candidate == prefix or candidate.startswith(prefix + ".")) and len(prefix) > best_len:
                    best, best_len = unit, len(prefix)
    return best


def violations(root: Path, tables: list[Table], pure: list[str] = ()) -> list[str]:
    """One line per import that breaks a rule (empty: the tree is layered as the tables say)."""
    levels = [{unit: i for i, layer in enumerate(t.layers) for unit in layer} for t in tables]
    out = []
    for table, level in zip(tables, levels):  # every module must have a place in its table
        for package in table.packages:
            for path in sorted((root / package).rglob("*.py")):
                name = module_name(root, path)
                if name not in CODELESS_ROOTS and _unit_of(name, level) is None:
                    out.append(f"{path.relative_to(root)}: module {name} is in no layer of the table")
    for name in pure:
        if not _is_module(root, name):
            out.append(f"docs: the pure module {name} does not exist")
    for imp in find_imports(root):
        top = imp.module.split(".")[0]
        if imp.target is None:
            if (imp.module, imp.function) not in DYNAMIC_IMPORTS:
                out.append(f"{imp.where}: {imp.module} imports a module named at run time (the layer check cannot "
                           f"see it; import it by name, or add it to DYNAMIC_IMPORTS with the reason)")
            continue
        target_top = imp.target.split(".")[0]
        if target_top in STANDALONE.get(top, set()) or target_top in NEVER_SHIPPED:
            out.append(f"{imp.where}: {imp.module} imports {imp.target} ({top} must never import {target_top})")
            continue
        if imp.module in CODELESS_ROOTS:
            out.append(f"{imp.where}: the package root {imp.module} imports {imp.target}")
            continue
        if imp.module in pure and target_top == top and imp.target != imp.module:
            out.append(f"{imp.where}: {imp.module} imports {imp.target}, but it is pure (```pure block: it "
                       f"imports nothing else of {top})")
        for level in levels:
            src, dst = _unit_of(imp.module, level), _unit_of(imp.target, level)
            if src is None or dst is None or src == dst:
                continue  # outside this table (stdlib, third party, another table) or within one unit
            if level[dst] < level[src]:
                out.append(f"{imp.where}: {imp.module} imports {imp.target}, a layer above it ({' '.join(dst)})")
            elif level[dst] == level[src]:
                out.append(f"{imp.where}: {imp.module} imports {imp.target}, its sibling ({' '.join(dst)}) "
                           "in one layer")
    return out


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _copy_of_the_tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_imports_follow_the_layer_tables():
    found = violations(ROOT, read_tables(DOC), read_pure(DOC))
    assert not found, "upward or sideways imports:\n" + "\n".join(found)


def test_the_tables_cover_pipeline_evals_and_rewards():
    covered = {package for table in read_tables(DOC) for package in table.packages}
    assert {"pipeline", "evals", "rewards"} <= covered, covered
    assert {"pipeline.grpo.advantages", "pipeline.grpo.losses"} <= set(read_pure(DOC))


def test_the_check_catches_upward_sideways_and_forbidden_imports(tmp_path):
    """The checker itself: a small tree with one import of each kind it must refuse."""
    _write(tmp_path, {
        "pipeline/__init__.py": "",
        "pipeline/low.py": "def f():\n    from pipeline.high import g\n",  # lazy, still upward
        "pipeline/high.py": "from pipeline import low\nfrom .side import x\n",  # down: fine; sideways
        "pipeline/side.py": "x = 1\n",
        "pipeline/stray.py": "",  # in no layer
        "evals/__init__.py": "",
        "rewards/__init__.py": "import torch\n",
        "sandbox/__init__.py": "from rewards import check\n",
    })
    layers = [[("pipeline.high",), ("pipeline.side",)], [("pipeline.low", "evals")]]
    found = violations(tmp_path, [Table(("pipeline", "evals"), layers)])
    assert len(found) == 5, found
    expected = ["pipeline.low imports pipeline.high, a layer above", "pipeline.high imports pipeline.side, its sibling",
                "module pipeline.stray is in no layer", "rewards must never import torch",
                "sandbox must never import rewards"]
    for fragment in expected:
        assert any(fragment in line for line in found), (fragment, found)


def test_the_check_sees_dynamic_imports(tmp_path):
    """importlib.import_module / __import__ with a literal name are imports; a computed name is refused
    except where DYNAMIC_IMPORTS allows it."""
    _write(tmp_path, {
        "pipeline/__init__.py": "",
        "pipeline/low.py": "import importlib\n\ndef f():\n    return importlib.import_module('pipeline.high')\n",
        "pipeline/mid.py": "def f():\n    return __import__('pipeline.side')\n",
        "pipeline/side.py": "from importlib import import_module\n\ndef g(name):\n    return import_module(name)\n",
        "pipeline/high.py": "import importlib\nimportlib.import_module('pipeline.low')\n",  # downwards: fine
        "evals/__init__.py": "",
        "rewards/__init__.py": "",
        "rewards/registry.py": ("import importlib\n\ndef _import_reward(name):\n"
                                "    return importlib.import_module(name)\n"),  # allowed
        "rewards/other.py": "import importlib\n\ndef _import_reward(name):\n    return importlib.import_module(name)\n",
        "sandbox/__init__.py": "__import__('rewards')\n",
    })
    layers = [[("pipeline.high",)], [("pipeline.mid",), ("pipeline.side",)], [("pipeline.low", "evals")]]
    found = violations(tmp_path, [Table(("pipeline", "evals"), layers)])
    expected = ["pipeline/low.py:4: pipeline.low imports pipeline.high, a layer above",
                "pipeline/mid.py:2: pipeline.mid imports pipeline.side, its sibling",
                "pipeline/side.py:4: pipeline.side imports a module named at run time",
                "rewards/other.py:4: rewards.other imports a module named at run time",
                "sandbox/__init__.py:1: sandbox imports rewards (sandbox must never import rewards)"]
    assert len(found) == len(expected), found
    for fragment in expected:
        assert any(line.startswith(fragment) for line in found), (fragment, found)


def test_planted_violations_in_a_copy_of_the_tree(tmp_path):
    """The real tables on a copy of the real tree, with upward imports planted: each is found, and
    nothing else is (the copy as it is has no violation, see the first test)."""
    root = _copy_of_the_tree(tmp_path)
    plants = {  # file -> (line appended, what the check must say)
        "pipeline/grpo/advantages.py": ("from pipeline.grpo.trainer import train\n",
                                        "pipeline.grpo.advantages imports pipeline.grpo.trainer, but it is pure"),
        "pipeline/grpo/losses.py": ("from pipeline.config.schema import TrainConfig\n",
                                    "pipeline.grpo.losses imports pipeline.config.schema, but it is pure"),
        "pipeline/data/problems.py": ("\n\ndef _planted():\n    import importlib\n\n"
                                      "    return importlib.import_module('pipeline.grpo.trainer')\n",
                                      "pipeline.data.problems imports pipeline.grpo.trainer, a layer above"),
        "rewards/equivalence/normalize.py": ("\n\ndef _planted():\n    from rewards.answers.span import HEDGED\n",
                                             "rewards.equivalence.normalize imports rewards.answers.span, a layer"),
        "rewards/claims/judge.py": ("\n\ndef _planted():\n    return __import__('rewards.equivalence.equiv')\n",
                                    "rewards.claims.judge imports rewards.equivalence.equiv, its sibling"),
        "rewards/strict.py": ('"""A new module."""\n', "module rewards.strict is in no layer"),
    }
    for name, (line, _) in plants.items():
        with (root / name).open("a") as f:
            f.write(line)
    found = violations(root, read_tables(DOC), read_pure(DOC))
    assert len(found) == len(plants), found
    for _, fragment in plants.values():
        assert any(fragment in line for line in found), (fragment, found)


def test_standalone_packages_load_without_torch():
    """The rule on the import graph as Python sees it (third-party imports included)."""
    code = ("import sys, rewards, sandbox, rewards.registry, rewards.outcome.code\n"
            "bad = sorted(m for m in ('torch', 'pipeline', 'evals', 'transformers') if m in sys.modules)\n"
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


if __name__ == "__main__":
    tree = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    problems = violations(tree, read_tables(DOC), read_pure(DOC))
    print("\n".join(problems) or "no violations")
    sys.exit(1 if problems else 0)
