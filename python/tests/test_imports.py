"""No import cycles inside the package circlerope (python/circlerope) or the experiment tiny_vlm
(experiments/tiny_vlm), lazy imports included.

Every module's imports are read from its source with ast, those inside functions too, and each
becomes an edge of the graph of the package's own modules:
- `import a.b.c` and `from a.b.c import x` depend on a.b.c; `from a.b import c` on the submodule
  a.b.c where c is one, else on a.b (a name its __init__ defines), as Python resolves them;
- a dependency on a module also depends on each of its parent packages that is not a parent of
  the importing module itself (those are initialised already, or being initialised): importing
  circlerope.hf.reference from circlerope.age runs circlerope/hf/__init__.py, and everything
  that imports; a name taken from a parent package (`from .. import NAME`) depends on it;
- relative imports are resolved against the importing module's package.
The graph must have no cycle; the message names one. The detector itself is checked on small
packages written here, with the kinds of cycle it must see.
"""
import ast
import os
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

SOURCE_DIR = Path(os.environ.get("CIRCLEROPE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
PACKAGES = {"circlerope": SOURCE_DIR / "python" / "circlerope", "tiny_vlm": SOURCE_DIR / "experiments" / "tiny_vlm"}
# Modules built from C++ (no source here; they import nothing of the package).
EXTENSIONS = {"circlerope": ("circlerope._core",), "tiny_vlm": ()}


def modules_of(root: Path, extensions=()) -> Dict[str, Optional[Path]]:
    """{dotted name: file} of the package at `root` and its subpackages (directories with an
    __init__.py); other directories (tests/) are not part of it. `extensions`: the names of its
    compiled modules, which have no file here."""
    out = dict.fromkeys(extensions)
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if not all((root.parent.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The package's module `name` is, or lies in (a.b.c.f where a.b.c is a module), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_graph(modules: Dict[str, Optional[Path]]) -> Dict[str, Set[str]]:
    """{module: the package's modules it imports}, by the rules in the module docstring."""
    graph = {}
    for name, path in modules.items():
        if path is None:  # compiled
            graph[name] = set()
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in modules else base)
        edges = set()
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is None:
                continue
            edges.add(resolved)
            parts = resolved.split(".")
            for end in range(1, len(parts)):  # the parent packages the import runs first
                parent = ".".join(parts[:end])
                if parent in modules and not name.startswith(parent + "."):
                    edges.add(parent)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A cycle of the graph as [a, b, ..., a], or None."""
    state: Dict[str, int] = {}  # 1 on the current path, 2 done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_package_has_no_import_cycle(package):
    modules = modules_of(PACKAGES[package], EXTENSIONS[package])
    assert f"{package}" in modules and len(modules) > 5, f"found no package at {PACKAGES[package]}"
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, f"import cycle in {package}: {' -> '.join(cycle)}"


def test_circlerope_imports_flow_one_way():
    """circlerope's modules import only the layers below them (its __init__.py lists them)."""
    layers = ["circlerope._checks", "circlerope._ops", "circlerope.config", "circlerope.positions",
              "circlerope.rotary", "circlerope.age", "circlerope.metrics", "circlerope.hf"]
    graph = import_graph(modules_of(PACKAGES["circlerope"], EXTENSIONS["circlerope"]))

    def layer(module: str) -> int:
        return max((i for i, prefix in enumerate(layers) if module == prefix or module.startswith(prefix + ".")),
                   default=-1)

    for module, targets in graph.items():
        for target in targets:
            if layer(module) >= 0 and layer(target) > layer(module):
                pytest.fail(f"{module} imports {target}, a layer above it")


# ---------------------------------------------------------------- the detector ---

def _write(root: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


@pytest.mark.parametrize("files, cycle", [
    # a lazy import inside a function: _hf_model -> hf -> _hf_model
    ({"pkg/__init__.py": "", "pkg/a.py": "from .b import f\n",
      "pkg/b.py": "def f():\n    from . import a\n    return a\n"}, ["pkg.a", "pkg.b", "pkg.a"]),
    # a name from the package's __init__ while it imports the module: circlerope -> _registration
    ({"pkg/__init__.py": "from . import reg\nVALUE = 1\n", "pkg/reg.py": "import pkg\n"},
     ["pkg", "pkg.reg", "pkg"]),
    ({"pkg/__init__.py": "from .core import g\n", "pkg/core.py": "def g():\n    from pkg import helper\n",
      "pkg/helper.py": "from . import core\n"}, ["pkg.core", "pkg.helper", "pkg.core"]),
    # through a subpackage's __init__: importing pkg.sub.leaf runs pkg/sub/__init__.py
    ({"pkg/__init__.py": "", "pkg/low.py": "import pkg.sub.leaf\n", "pkg/sub/__init__.py": "from . import user\n",
      "pkg/sub/leaf.py": "", "pkg/sub/user.py": "from ..low import x\n"},
     ["pkg.low", "pkg.sub", "pkg.sub.user", "pkg.low"]),
    # a name (not a submodule) of a parent package: pkg.sub.x -> pkg (its __init__) -> pkg.sub.x
    ({"pkg/__init__.py": "from .sub.x import f\nNAME = 1\n", "pkg/sub/__init__.py": "",
      "pkg/sub/x.py": "from .. import NAME\n"}, ["pkg", "pkg.sub.x", "pkg"]),
])
def test_the_detector_sees_each_kind_of_cycle(tmp_path, files, cycle):
    found = find_cycle(import_graph(modules_of(_write(tmp_path, files))))
    assert found is not None and set(found) == set(cycle), found


def test_the_detector_passes_what_python_resolves_without_a_cycle(tmp_path):
    # a sibling submodule from a subpackage's own module, and a parent package a module lies in
    root = _write(tmp_path, {"pkg/__init__.py": "from .sub import model\n", "pkg/base.py": "",
                             "pkg/sub/__init__.py": "from . import model\n",
                             "pkg/sub/model.py": "from . import helper\nfrom .. import base\nimport pkg.sub.helper\n",
                             "pkg/sub/helper.py": "import os\nfrom pkg.base import x\n",
                             "pkg/tests/test_x.py": "import pkg\n"})
    modules = modules_of(root)
    assert "pkg.tests.test_x" not in modules
    assert find_cycle(import_graph(modules)) is None
