"""The attributes of a Lightning callback that 0.2 took as flat arguments, read from its settings objects.

Subclasses (DRESS) and users read ``callback.batch_size``, ``callback.dirpath`` ... as before; they are
read-only views of ``model_access`` / ``generation`` / ``outputs``
(:class:`~lightning_div.settings.ModelAccess`, :class:`~lightning_div.settings.Generation`,
:class:`~lightning_div.settings.Outputs`), so that one setting lives in one place.
"""

from __future__ import annotations

from lightning_div._internal.attributes import ReadThrough
from lightning_div.model.formatting import DialogueLayout
from lightning_div.settings import Generation, ModelAccess, Outputs

__all__ = ["SettingsAttributes"]


class SettingsAttributes:
    """Read-only views of a callback's settings objects under their 0.2 names (``format`` is now ``layout``)."""

    model_access: ModelAccess
    generation: Generation
    outputs: Outputs
    _datamodule_layout: DialogueLayout | None = None  # the trainer's datamodule's layout, seen at setup

    model_attr: ReadThrough[str] = ReadThrough(
        "model_access.model_attr",
        "The LightningModule's attribute holding the Hugging Face model (``model.model_attr``).",
    )
    tokenizer_attr: ReadThrough[str] = ReadThrough(
        "model_access.tokenizer_attr",
        "The LightningModule's attribute holding its tokenizer (``model.tokenizer_attr``).",
    )
    batch_size: ReadThrough[int] = ReadThrough(
        "generation.batch_size", "Contexts per generation / scoring / embedding batch (``generation.batch_size``)."
    )
    max_new_tokens: ReadThrough[int] = ReadThrough(
        "generation.max_new_tokens", "The generation length limit (``generation.max_new_tokens``)."
    )
    dirpath: ReadThrough[str | None] = ReadThrough(
        "outputs.dirpath", "The cache directory given (``outputs.dirpath``); None: under ``default_root_dir``."
    )
    show_progress: ReadThrough[bool] = ReadThrough(
        "outputs.show_progress", "Progress bars for the long steps (``outputs.show_progress``)."
    )

    @property
    def layout(self) -> DialogueLayout:
        """The layout in use: ``model.layout``, else the datamodule's (seen at setup), else ``DialogueLayout()``."""
        return self.model_access.layout or self._datamodule_layout or DialogueLayout()

    @property
    def format(self) -> DialogueLayout:
        """0.2's name of :attr:`layout` (read-only)."""
        return self.layout
