"""selfcal: measure a robot arm's real body. The command line and the end-to-end demo live here."""

from rigs.version import VERSION as __version__

__all__ = ["__version__"]
