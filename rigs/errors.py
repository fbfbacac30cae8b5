"""The one error type for a user's mistake.

Every room raises :class:`InputError` for bad input (a file, row, key or value the user gave);
the command line turns it into one sentence on stderr and exit status 2. Anything else that
escapes is a bug in selfcal and keeps its traceback.
"""


class InputError(Exception):
    """Bad input from the user: the message is one sentence naming the file, row or key."""


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message for a sentence, or its type's name when it says nothing
    (an empty message must not turn a user's bad file into a crash)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
