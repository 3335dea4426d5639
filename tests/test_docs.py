"""The documentation site builds strictly, and its API reference covers the public API.

``mkdocs build --strict`` fails on a broken link or anchor, a page missing from the nav, a
docstring mkdocstrings cannot render (e.g. a Google-style argument that is not in the
signature) or a cross-reference that does not resolve; this test runs it into a temporary
directory. The built API pages must then have an entry for every name in
``lightning_div.__all__`` and in the callbacks' and metrics' ``__all__``.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = ("lightning_div", "lightning_div.callbacks", "lightning_div.metrics", "lightning_div.preference")

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")

#: One worker runs this file's tests, so the site (a module fixture) is built once: split over two xdist
#: workers it was built on each (13 CPU-seconds a build).
pytestmark = pytest.mark.xdist_group("docs_site")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def test_site_builds_strictly(site):
    for page in (
        "index.html",
        "getting-started/index.html",
        "metrics/index.html",
        "bad-input/index.html",
        "api/metrics/index.html",
    ):
        assert (site / page).is_file(), page


def test_api_reference_has_no_raw_sphinx_roles(site):
    # docs/_ext/sphinx_roles.py turns :func:`x` into code; without it the roles print as text
    for page in (site / "api").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        for role in (":func:", ":class:", ":meth:", ":mod:", ":data:"):
            assert role not in text, f"{page.relative_to(site)} shows a raw {role} role"


@pytest.fixture(scope="module")
def documented_ids(site: Path) -> set[str]:
    """The anchors mkdocstrings gave the objects it rendered in the API reference."""
    ids: set[str] = set()
    for page in (site / "api").rglob("*.html"):
        ids.update(re.findall(r'id="(lightning_div[\w.]*)"', page.read_text(encoding="utf-8")))
    return ids


def public_names() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC_MODULES for name in importlib.import_module(module).__all__]


@pytest.mark.parametrize("module,name", public_names())
def test_public_name_is_in_the_api_reference(documented_ids, module, name):
    obj = getattr(importlib.import_module(module), name)
    ids = documented_ids
    # a class or function is documented where it is defined; a constant under its package's module
    defined_in = getattr(obj, "__module__", None)
    if defined_in is not None and hasattr(obj, "__qualname__"):
        assert f"{defined_in}.{obj.__qualname__}" in ids, f"{module}.{name} ({defined_in}) is not in docs/api/"
    else:
        assert any(i.startswith(module + ".") and i.endswith("." + name) for i in ids), (
            f"{module}.{name} is not in docs/api/"
        )


def test_the_api_reference_is_generated_not_written():
    # every API page renders modules with mkdocstrings (:::), so it follows the code
    pages = sorted((ROOT / "docs" / "api").glob("*.md"))
    assert pages
    for page in pages:
        if page.name != "index.md":
            assert re.search(r"^::: lightning_div", page.read_text(encoding="utf-8"), re.MULTILINE), page.name


def test_docs_extra_is_part_of_dev():
    # the docs extra installs the build; the dev extra includes it, so the tests can run it
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(r.startswith("mkdocs-material") for r in extras["docs"])
    assert any(r.startswith("mkdocstrings[python]") for r in extras["docs"])
    assert "lightning-div[docs]" in extras["dev"]
