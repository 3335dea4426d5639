"""``lightning-div fit | validate | test | predict``: LightningCLI with lightning-div's defaults.

The only command-line module that imports Lightning; the dispatcher (:mod:`lightning_div.cli.main`)
imports it for these subcommands alone. A config error is one line (LightningCLI's parser raises
instead of printing its 50-line usage), and the end-of-fit summary prints last, after the trackers
have closed.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_div._internal.compat.trackers import drop_wandb_anonymous
from lightning_div._internal.lightning import PACKAGE, pl, submodule
from lightning_div._internal.tracking import local_log_dir, tracker_kind
from lightning_div.cli.common import UsageError, describe

# Imported so that `class_path: DialogueLM` / `DialogueDataModule` resolve by their short names.
from lightning_div.datamodules.dialogue import DialogueDataModule  # noqa: F401
from lightning_div.keys import SUMMARY_KEYS
from lightning_div.model.dialogue_lm import DialogueLM  # noqa: F401
from lightning_div.summary import run_verdict
from lightning_div.verdict import verdict_lines

if TYPE_CHECKING:
    from pytorch_lightning.cli import LightningCLI
else:  # the package lightning-div's classes bind to (lightning_div._internal.lightning)
    LightningCLI = submodule("cli").LightningCLI


def run_summary(trainer: Any) -> str:
    """The last epoch's diversity, RUQ and DRESS figures, and where the logs and plots are."""
    sections = ("val", "train", "dress", "timing")
    # a callback with a name logs "<name>/val/ruq": shown under its full key, after the unnamed ones
    metrics = {
        k: float(v)
        for k, v in trainer.callback_metrics.items()
        if not k.endswith("_step")
        and (k.split("/")[0] in sections or (k.count("/") >= 2 and k.split("/")[1] in sections))
    }
    named = sorted({k.split("/", 1)[0] for k in metrics if k.split("/")[0] not in sections})
    keys = [k for k in SUMMARY_KEYS if k in metrics] + [
        f"{n}/{k}" for n in named for k in SUMMARY_KEYS if f"{n}/{k}" in metrics
    ]
    keys += sorted(k for k in metrics if k.startswith("timing/") or "/timing/" in k)
    lines = [f"lightning-div: fit finished after {trainer.current_epoch} epoch(s), {trainer.global_step} steps"]
    lines += verdict_lines(run_verdict(trainer))  # the run's state first, as print_summary says it
    if keys:
        width = max(len(k) for k in keys)
        lines += [f"  {k.ljust(width)}  {metrics[k]:.4f}" for k in keys]
    for lg in trainer.loggers:
        where = getattr(lg, "log_dir", None) or getattr(lg, "save_dir", None)
        lines.append(f"  {type(lg).__name__}: {where}")
        if tracker_kind(lg) == "TensorBoardLogger":
            lines.append(f"    view: tensorboard --logdir {lg.save_dir}")
        if tracker_kind(lg) == "WandbLogger":
            lines.append(f"    offline run: wandb sync {getattr(lg, 'save_dir', '.')}/wandb/offline-run-*")
    log_dir = local_log_dir(trainer)  # not trainer.log_dir: a collective, and this runs on rank 0 only
    if log_dir:
        lines.append(f"  plots and sample tables: {Path(log_dir) / 'lightning_div'}")
        lines.append(f"  one-page report: lightning-div report {trainer.default_root_dir} --out report.html")
    return "\n".join(lines)


def add_plain_progress(trainer: Any) -> None:
    """Give the trainer a :class:`~lightning_div.callbacks.progress.PlainProgress` unless it has one: a log
    file (nohup, CI, a job log) gets plain lines every 50 steps and around each measurement."""
    from lightning_div.callbacks.progress import PlainProgress, find_progress

    callbacks = getattr(trainer, "callbacks", None)
    if isinstance(callbacks, list) and find_progress(trainer) is None:
        callbacks.append(PlainProgress())


class DiversityCLI(LightningCLI):
    """LightningCLI with lightning-div's defaults and an end-of-fit summary."""

    def before_validate(self) -> None:
        add_plain_progress(self.trainer)

    def before_test(self) -> None:
        add_plain_progress(self.trainer)

    def before_fit(self) -> None:
        add_plain_progress(self.trainer)
        # W&B looks for a git repository from its run directory when it starts; a directory that does not
        # exist yet (the demo's runs/demo on a first run) prints "git root ... does not exist".
        for lg in self.trainer.loggers:
            if tracker_kind(lg) == "WandbLogger" and getattr(lg, "save_dir", None):
                Path(str(lg.save_dir)).mkdir(parents=True, exist_ok=True)
            # Lightning 2.6's WandbLogger passes anonymous=None to wandb.init, and W&B >= 0.22 warns
            # "The anonymous setting has no effect" for any value it is given: left out, it is not given
            if tracker_kind(lg) == "WandbLogger":
                drop_wandb_anonymous(lg)

    def after_fit(self) -> None:
        summary = run_summary(self.trainer) if self.trainer.is_global_zero else None
        # Lightning leaves the W&B run open (for a later test()); the CLI is done with it, and a run left
        # open would be reused by the next WandbLogger in the same process. Closed before the summary is
        # printed: W&B prints its run history when the run finishes, which buried the summary.
        wandb = sys.modules.get("wandb")  # imported by a WandbLogger that started its run
        if any(tracker_kind(lg) == "WandbLogger" for lg in self.trainer.loggers) and wandb is not None:
            if wandb.run is not None:  # the logger's run (WandbLogger starts it with wandb.init)
                wandb.run.finish()
        if summary is not None:
            print(summary, flush=True)


def training_user_errors() -> tuple[type[BaseException], ...]:
    """The user mistakes of ``fit`` / ``validate`` / ``test``: one line and exit code 2.

    Besides a config that does not parse (a UsageError): narrower than the other subcommands', as
    inside a training run a ValueError or TypeError may be a bug worth its traceback; a missing or
    malformed data file, a model or encoder that cannot be loaded (an OSError) and missing callback
    inputs are not.
    """
    from lightning_div.callbacks.checks import MissingInputsError
    from lightning_div.pairs import DataFormatError

    return (OSError, DataFormatError, MissingInputsError)


def run_lightning(command: str, argv: list[str], from_sys_argv: bool = False) -> int:
    """Run LightningCLI's ``command`` (fit, validate, test, predict) with ``argv``.

    Args:
        command: the Trainer method.
        argv: its arguments (``--config FILE``, ``--trainer.max_epochs=3``, ...).
        from_sys_argv: the arguments are ``sys.argv[2:]``: LightningCLI reads ``sys.argv`` itself
            (given both, it warns that they may disagree).

    Returns:
        0 (LightningCLI raises on failure).

    Raises:
        UsageError: a config or argument that does not parse (one line, not the usage).
    """
    # exit_on_error=False: jsonargparse raises its error instead of printing ~50 lines of usage first. One
    # dict per subcommand: LightningCLI writes each subcommand's description into its own.
    parser_kwargs: dict[str, Any] = {"prog": "lightning-div", "exit_on_error": False}
    parser_kwargs.update({name: {"exit_on_error": False} for name in LightningCLI.subcommands()})
    check_environment()
    check_config_files(argv)
    with third_party_notices_hidden():
        try:
            DiversityCLI(
                pl.LightningModule,
                pl.LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                seed_everything_default=0,
                save_config_kwargs={"overwrite": True},
                args=None if from_sys_argv else [command, *argv],
                parser_kwargs=parser_kwargs,
            )
        except argparse.ArgumentError as err:
            raise UsageError(
                f"{parse_error(str(err))}{renamed_key_hint(str(err))} (see 'lightning-div {command} --help')"
            ) from err
        except ValueError as err:
            cause = instantiation_mistake(err)
            if cause is None:
                raise
            raise UsageError(describe(cause)) from err
    return 0


def instantiation_mistake(err: BaseException) -> BaseException | None:
    """The user mistake inside jsonargparse's error for a class of the config that failed to build, or None.

    jsonargparse reports any exception raised while it builds the config's classes (a model that
    cannot be loaded, a missing data file) as "Does not validate against any of the Union subtypes",
    the original chained below it: that original, when it is a mistake of :func:`training_user_errors`.
    """
    mistakes = training_user_errors()
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, mistakes):
            return current
        current = current.__cause__ or current.__context__
    return None


def check_environment() -> None:
    """The environment variables lightning-div reads hold values it takes, said before anything starts.

    Raises:
        UsageError: ``LIGHTNING_DIV_PROGRESS`` is no switch value (``0``/``1``, ``false``/``true``, ...).
    """
    from lightning_div.callbacks.progress import progress_wanted

    try:
        progress_wanted()
    except ValueError as err:
        raise UsageError(str(err)) from None


def check_config_files(argv: list[str]) -> None:
    """Each ``--config`` / ``-c`` file that exists must be valid YAML; said with its name and line.

    jsonargparse's own message names neither the file nor the option ("while parsing ... in
    '<unicode string>'"). A missing file is left to jsonargparse (:func:`parse_error` words it).

    Raises:
        UsageError: ``--config <file>: not valid YAML (<problem>, line L, column C)``.
    """
    import yaml

    paths = [b for a, b in zip(argv, argv[1:]) if a in ("--config", "-c")]
    paths += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for path in paths:
        if not Path(path).is_file():
            continue
        try:
            config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(err, "problem", None) or type(err).__name__
            raise UsageError(f"--config {path}: not valid YAML ({problem}{where})") from None
        except UnicodeDecodeError as err:
            raise UsageError(f"--config {path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
        values = expanded_size(config)
        if values > MAX_CONFIG_VALUES:
            raise UsageError(
                f"--config {path}: its YAML aliases expand to {values:,} values (at most {MAX_CONFIG_VALUES:,}): "
                "an alias bomb? Write the values out"
            )


# A config of ours holds hundreds of values; a file of a few hundred bytes whose aliases refer to aliases
# ("billion laughs") expands to hundreds of millions, which the config parser then copies (560 MB, minutes).
MAX_CONFIG_VALUES = 1_000_000


def expanded_size(value: Any) -> int:
    """How many values ``value`` holds with every shared part counted each time it appears (YAML aliases
    expanded), computed without expanding: each container's size once.

    >>> shared = [1, 2, 3]
    >>> expanded_size({"a": shared, "b": [shared, shared]})  # the dict, 2 keys, list b, [1, 2, 3] 3 times
    16
    """
    sizes: dict[int, int] = {}

    def size(v: Any) -> int:
        if not isinstance(v, (dict, list)):
            return 1
        if id(v) not in sizes:
            sizes[id(v)] = 0  # a cycle (an alias inside itself) counts once
            children = [*v.keys(), *v.values()] if isinstance(v, dict) else v
            sizes[id(v)] = 1 + sum(size(c) for c in children)
        return sizes[id(v)]

    return size(value)


_KEY = re.compile(r'^Parser key "(?P<key>[^"]+)":\s*')
_NO_FILE = re.compile(r"^File does not exist: '(?P<path>.*)'$")


def parse_error(message: str) -> str:
    """jsonargparse's error in our words: ``--config x.yaml: no such file``, ``--trainer.max_epochs: ...``.

    >>> parse_error('Parser key "config": File does not exist: ' + repr("no.yaml"))
    '--config no.yaml: no such file'
    """
    message = " ".join(message.split())
    key = _KEY.match(message)
    if key is None:
        return message
    rest = message[key.end() :]
    missing = _NO_FILE.match(rest)
    if missing:
        return f"--{key['key']} {missing['path']}: no such file"
    return f"--{key['key']}: {rest}"


_REFUSED_KEY = re.compile(r"Option '(?P<key>\w+)' is not accepted")


def renamed_key_hint(message: str) -> str:
    """``" (0.2's X: <its 1.0 place>)"`` when a config key jsonargparse refused is a datamodule's 0.2 keyword, else "".

    A YAML config is parsed against the 1.0 signature, so a 0.2 key is refused there (Python calls still
    take it for one release, with a warning); the hint says where it went.

    >>> renamed_key_hint("Problem with given class_path: Option 'max_history' is not accepted")
    " (0.2's max_history: layout: {max_turns: ...} in 1.0)"
    """
    from lightning_div.datamodules.options import DATAMODULE_REGROUPED, DATAMODULE_RENAMED, STREAMING_REGROUPED

    found = _REFUSED_KEY.search(message)
    if found is None:
        return ""
    key = found["key"]
    if key in DATAMODULE_RENAMED:
        return f" (0.2's {key}: {DATAMODULE_RENAMED[key]} in 1.0)"
    regrouped = {**DATAMODULE_REGROUPED, **STREAMING_REGROUPED}
    if key in regrouped:
        argument, field = regrouped[key]
        return f" (0.2's {key}: {argument}: {{{field}: ...}} in 1.0)"
    return ""


# Third-party notices that say nothing about the user's run, hidden by the command line only (never by
# the library: a user's own Trainer shows them). Each is matched by its source and its text, so any other
# warning or message from the same place still shows. Listed in docs/getting-started.md.
#   - torch >= 2.10 deprecates `isinstance(x, LeafSpec)`, which Lightning 2.6's CombinedLoader uses each time
#     it (re)builds the dataloaders: every epoch under `reload_dataloaders_every_n_epochs: 1` (DRESS).
#   - Lightning's advertisements for its cloud services (litlogger, litmodels) at every start.
LEAFSPEC_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
LIGHTNING_TIP = "\N{ELECTRIC LIGHT BULB} Tip:"


class _NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LIGHTNING_TIP)


@contextmanager
def third_party_notices_hidden() -> Iterator[None]:
    """Within the block, hide the third-party notices listed above (restored after)."""
    tips = logging.getLogger(f"{PACKAGE}.utilities.rank_zero")  # the logger rank_zero_info writes to
    no_tips = _NoTips()
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=LEAFSPEC_WARNING,
            category=FutureWarning,
            module=r"(pytorch_lightning|lightning\.pytorch)\.utilities\._pytree",
        )
        tips.addFilter(no_tips)
        try:
            yield
        finally:
            tips.removeFilter(no_tips)
