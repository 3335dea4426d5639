"""Docs lint: what the README and the docs pages claim that can be checked against its source.

Each rule guards a reader from a wrong instruction or a wrong number:

- **links**: every relative link of the README points at a file of the repository (the docs pages'
  links and anchors are checked by the strict site build, ``test_docs.py``);
- **the front door**: the README stays at most 300 lines; each CI marker is there once (``.ci/run``
  runs the first block after it) and the test command runs the tests by xdist group;
- **calls**: every call of a lightning-div class, or of TRL's ``GRPOConfig`` / ``RLOOConfig``, shown in
  inline code or in a python block of the README or a docs page passes only keyword arguments that the
  class accepts (a renamed parameter left in the docs is a ``TypeError`` for whoever copies it);
- **numbers**: the figures a page quotes from a results page are on that page, a stated ``ln k`` is
  ln k, and the colours a page names are the plot's;
- **measured times**: every time the README's quick start quotes comes with the machine's load
  (the project's rule for evidence);
- **configs and commands**: the GPU section's config exists and fine-tunes the model the section
  names, and its install block removes ``faiss-cpu``, which the ``cpu`` extra installs;
- **fragments**: a README python block that is not a whole script says so.

What it does not check is wording: a test that asserted a sentence ("not measured here", "CPU-seconds")
failed on every rewording and guarded nothing a reader relies on (issue 61 item 6). That the docs'
scripts run as printed is checked by the tests of the parts they use (``test_readme.py``,
``test_grpo_trainer.py``, ``test_measure.py``, ...), through ``docs_blocks``.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
from functools import cache

import matplotlib.colors as mcolors
import pytest
import yaml
from docs_blocks import FENCE, ROOT, fenced_block, fenced_blocks, marked_block, read, section

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
#: The pages whose calls must take the 1.0 arguments: not the changelog, which names the 0.2 forms it replaced
CALL_PAGES = [p for p in PAGES if p.name != "changelog.md"]


# -- links and the front door -------------------------------------------------------------------------------


def test_every_relative_link_of_the_readme_points_at_a_file():
    text = read(README)
    targets = re.findall(r"\]\(((?!https?://|#)[^)#]+)(?:#[^)]*)?\)", text)
    assert targets  # the pattern finds the README's links
    for target in targets:
        assert (ROOT / target).is_file(), f"README.md links to {target}, which does not exist"
    # GRPO, RLOO and DPO are reachable from the front door (issue 55 item 4: found only through mkdocs.yml)
    assert {"docs/grpo.md", "docs/dpo.md"} <= set(targets)


def test_the_readme_is_the_front_door_and_ci_reads_its_blocks():
    text = read(README)
    assert len(text.splitlines()) <= 300
    for marker in ("<!-- ci:test -->", "<!-- ci:install -->", "<!-- ci:user-install -->"):
        assert text.count(marker) == 1, marker  # .ci/run reads the first fenced block after each marker
    install = marked_block(section(text, "Install", "README.md"), "<!-- ci:install -->", "bash")
    assert '"torch==2.13.0"' in install
    # the test command runs the tests on xdist workers by group (tests/conftest.py: the two-process tests)
    test_command = marked_block(text, "<!-- ci:test -->", "bash")
    assert test_command.startswith("python -m pytest") and "--dist loadgroup" in test_command


# -- calls shown in the docs take the arguments the classes take --------------------------------------------


@cache
def documented_classes() -> dict[str, type]:
    """The classes a user calls from the docs: lightning-div's public ones and TRL's trainer configs."""
    import lightning_div
    import lightning_div.callbacks
    import lightning_div.integrations.transformers
    import lightning_div.integrations.trl

    classes: dict[str, type] = {}
    for module in (
        lightning_div,
        lightning_div.callbacks,
        lightning_div.integrations.transformers,
        lightning_div.integrations.trl,
    ):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value):
                classes[name] = value
    try:  # the hf extra: without it the docs' TRL configs go unchecked, lightning-div's classes still are
        import trl
    except ImportError:
        return classes
    classes.update(GRPOConfig=trl.GRPOConfig, RLOOConfig=trl.RLOOConfig)
    return classes


def accepted(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` accepts: its ``__init__``'s and, while one passes ``**kwargs`` on,
    its bases'. None where the last one still takes any keyword."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        parameters = list(inspect.signature(klass.__init__).parameters.values())[1:]  # without self
        names |= {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        # ``**deprecated`` takes only 0.2's names (with a warning): the docs use the 1.0 ones
        if not any(p.kind is p.VAR_KEYWORD and p.name != "deprecated" for p in parameters):
            return names
    return None


def code_of(text: str) -> list[str]:
    """A page's python blocks and its inline code spans (outside the blocks) that parse as Python."""
    blocks = fenced_blocks(text, "python")
    prose = re.sub(rf"{FENCE}.*?{FENCE}", "", text, flags=re.DOTALL)
    spans = re.findall(r"`([^`\n]+)`", prose)
    out = []
    for code in [*blocks, *spans]:
        try:
            ast.parse(code)
        except SyntaxError:
            continue
        out.append(code)
    return out


def keywords_of(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(class name, keyword, line) of every call ``Name(...)`` in ``tree``; ``**d`` spreads the keywords of a
    ``d = dict(...)`` assigned in the same code."""
    spreads = {
        target.id: [k.arg for k in node.value.keywords if k.arg]
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        if isinstance(node.value.func, ast.Name) and node.value.func.id == "dict"
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        for keyword in node.keywords:
            if keyword.arg is not None:
                out.append((name, keyword.arg, node.lineno))
            elif isinstance(keyword.value, ast.Name):
                out += [(name, arg, node.lineno) for arg in spreads.get(keyword.value.id, [])]
    return out


@pytest.mark.parametrize("page", CALL_PAGES, ids=[str(p.relative_to(ROOT)) for p in CALL_PAGES])
def test_every_call_in_the_docs_passes_arguments_the_class_takes(page):
    classes = documented_classes()
    wrong = []
    for code in code_of(read(page)):
        for name, keyword, line in keywords_of(ast.parse(code)):
            if name in classes and (names := accepted(classes[name])) is not None and keyword not in names:
                wrong.append(f"{name}({keyword}=...) in {code.splitlines()[line - 1].strip()!r}")
    assert wrong == [], f"{page.relative_to(ROOT)}: " + "; ".join(wrong)


def test_the_call_check_sees_keywords_spreads_and_inheritance():
    tree = ast.parse("common = dict(model=access)\ncb = RUQMonitor(plot=None, **common)")
    assert sorted(keywords_of(tree)) == [
        ("RUQMonitor", "model", 2),
        ("RUQMonitor", "plot", 2),
        ("dict", "model", 1),
    ]
    ruq = accepted(documented_classes()["RUQMonitor"])
    assert ruq is not None and {"plot", "model", "generation"} <= ruq  # model, generation: the base's
    assert "not_a_parameter" not in ruq and "num_beams" not in ruq  # a 0.2 name (deprecated) is not the docs' form
    assert code_of("`SemanticGroupReward(num_generations=G)` and `lightning-div fit`") == [
        "SemanticGroupReward(num_generations=G)"
    ]
    assert code_of("a `f(x=1)` b\n```python\ny = 2\n```\n") == ["y = 2\n", "f(x=1)"]


def test_the_knobs_named_when_group_sem_ent_falls_are_grpo_settings():
    trl = pytest.importorskip("trl")
    falls = section(read(DOCS / "grpo.md"), "When group Sem-Ent falls", "docs/grpo.md")
    assert "SemanticGroupReward" in falls
    for knob in ("reward_weights", "temperature", "beta", "num_generations"):
        assert knob in falls and knob in {f.name for f in trl.GRPOConfig.__dataclass_fields__.values()}, knob


# -- numbers --------------------------------------------------------------------------------------------------


def test_sem_ent_is_read_against_the_gold_with_the_results_numbers():
    page = read(DOCS / "callbacks" / "semantic-diversity.md")
    part = section(page, "What a good or a bad Sem-Ent is", "docs/callbacks/semantic-diversity.md")
    assert "val/sem_ent_gold" in part
    for k, value in re.findall(r"ln (\d+) = ([\d.]+)", part):
        assert float(value) == round(math.log(int(k)), len(value.split(".")[1])), (k, value)
    assert re.search(r"ln \d+ = ", part)  # the page states the ceiling of k clusters
    results = read(DOCS / "results" / "dress_vs_baseline.md")
    # every figure the table quotes from the results page is on that page
    for number in ("2.605 ± 0.036", "2.746 ± 0.026", "own Sem-Ent on the same 500 contexts is 2.95", "0.67 ± 0.09"):
        assert number in results, number
    for shown in ("2.61 ± 0.04", "2.75 ± 0.03", "| 2.95 |", "0.06–0.79"):
        assert shown in part, shown


def _colour_name(rgba) -> str:
    """The plain name of a bar's colour: which of red, grey, orange, blue it is nearest to."""
    names = {"red": "#d62728", "grey": "#9aa5b1", "orange": "#ff7f0e", "blue": "#1f77b4"}
    r, g, b = mcolors.to_rgb(rgba)
    return min(names, key=lambda n: sum((x - y) ** 2 for x, y in zip((r, g, b), mcolors.to_rgb(names[n]))))


def test_the_histogram_colours_the_page_names_are_the_plots():
    from lightning_div.semantic.plots import share_histogram

    fig = share_histogram([0.7, 0.3], [0.5, 0.5], ["0: a", "1: b"], "t")
    ax = fig.axes[0]
    colours = {c.get_label(): _colour_name(c.patches[0].get_facecolor()) for c in ax.containers}
    assert colours == {"generated": "red", "gold": "grey"}
    page = read(DOCS / "callbacks" / "semantic-diversity.md")
    text = page.split("`val/cluster_histogram`: ", 1)[1].split("\n\n", 1)[0]
    assert "generated responses (red" in text and "(grey" in text
    assert "orange" not in page and "blue" not in page


def test_every_time_the_quick_start_quotes_names_the_load():
    """A time measured on a shared 2-core machine means little without its load: each paragraph that quotes
    one (``s wall``, ``CPU-seconds``) says how loaded the machine was (idle, quiet, or its load average)."""
    quick_start = section(read(README), "Quick start", "README.md")
    timed = [p for p in quick_start.split("\n\n") if re.search(r"\d s wall|\d CPU-seconds", p)]
    assert timed, "the quick start quotes no measured time"
    for paragraph in timed:
        assert re.search(r"load average|idle|quiet", paragraph), paragraph


# -- configs and commands -------------------------------------------------------------------------------------


def test_the_gpu_section_names_a_config_that_fine_tunes_the_model_it_names():
    gpu = section(read(DOCS / "getting-started.md"), "On a GPU", "docs/getting-started.md")
    (config_path,) = set(re.findall(r"configs/[\w-]+\.yaml", gpu))
    config = yaml.safe_load((ROOT / config_path).read_text())
    model = config["model"]["init_args"]
    name = model["model_name_or_path"]
    assert name == "microsoft/DialoGPT-medium" and f"`{name}`" in gpu  # a pretrained model, the one named
    assert "from_scratch" not in model and "tokenizer" not in model  # the model's own tokenizer
    assert config["trainer"]["accelerator"] == "gpu" and config["trainer"]["precision"] == "bf16-mixed"
    # the install block removes faiss-cpu first: the cpu extra installs it, and it clashes with the gpu extra's
    commands = fenced_block(gpu, "bash", "docs/getting-started.md's 'On a GPU'").splitlines()
    uninstall = next(i for i, c in enumerate(commands) if c.startswith("python -m pip uninstall -y faiss-cpu"))
    install = next(i for i, c in enumerate(commands) if c.startswith('python -m pip install ".[gpu'))
    assert uninstall < install
    extras = read("pyproject.toml")
    assert re.search(r'^cpu = \["faiss-cpu', extras, re.M) and re.search(r'^gpu = \["faiss-gpu', extras, re.M)


# -- fragments ------------------------------------------------------------------------------------------------


def test_the_readme_fragments_say_so():
    """The first python block is a whole script (compiled here, run by test_readme.py); "Add it to your
    Trainer" needs the reader's own module, and says so, and so does its DRESS line."""
    text = read(README)
    first = fenced_block(text, "python", "README.md")
    assert first == fenced_block(section(text, "Quick start", "README.md"))
    compile(first, "README.md: Quick start", "exec")
    add = section(text, "Add it to your Trainer", "README.md")
    assert "*A fragment:*" in add
    assert "*a fragment*" in add  # the DRESS line names what it needs and is marked too
