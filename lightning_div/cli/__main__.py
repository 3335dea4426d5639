"""``python -m lightning_div.cli``: the ``lightning-div`` command."""

from lightning_div.cli.main import main

raise SystemExit(main())
