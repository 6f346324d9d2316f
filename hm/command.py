"""The base of every `hm` command line (typed-argument-parser)."""

from tap import Tap


class Command(Tap):
    """A `Tap` with `--kebab-case` flags and no abbreviated flags, as every `hm` command."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("underscores_to_dashes", True)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
