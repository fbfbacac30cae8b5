"""The one error type for a user's mistake.

Every room raises :class:`InputError` for bad input (a file, row, key or value the user gave);
the command line turns it into one sentence on stderr and exit status 2. Anything else that
escapes is a bug in selfcal and keeps its traceback.

The library speaks in its own terms: a sentence about a setting names it with :func:`setting`,
by the keyword a Python caller passes (``per_session``), never by a command-line flag the caller
never typed. ``str(error)`` reads that name; the command line shows the flag its user typed
(``--per-session``) instead.
"""

from __future__ import annotations

import re
from typing import Callable

# How a setting sits inside a message until it is read: a keyword, as a Python caller spells it.
_SETTING = re.compile(r"\{setting:([A-Za-z_][A-Za-z0-9_]*)\}")


def setting(name: str) -> str:
    """``name``, a keyword of the library call or a field of its options (``per_session``), marked
    in an :class:`InputError`'s message so each reader sees it in their own terms: ``str()`` shows
    ``per_session``, the command line ``--per-session``."""
    if not _SETTING.fullmatch("{setting:" + name + "}"):
        raise ValueError(f"not a setting's name: {name!r}")
    return "{setting:" + name + "}"


class InputError(Exception):
    """Bad input from the user: the message is one sentence naming the file, row, key or setting."""

    def __str__(self) -> str:
        return self.in_terms(lambda name: name)

    @property
    def marked(self) -> str:
        """The sentence with its settings still marked, to build a refusal around this one
        (``InputError(f"{path}: {error.marked}")``) that still names them in each reader's terms."""
        return super().__str__()

    @property
    def settings(self) -> tuple[str, ...]:
        """The settings the sentence names (keywords, in order), for a caller that wants to point at one."""
        return tuple(_SETTING.findall(self.marked))

    def in_terms(self, name_of: Callable[[str], str]) -> str:
        """The sentence with every setting written as ``name_of(keyword)`` (the command line passes
        one that answers with its flag)."""
        return _SETTING.sub(lambda match: name_of(match.group(1)), self.marked)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message for a sentence, or its type's name when it says nothing
    (an empty message must not turn a user's bad file into a crash)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
