"""The one error type for a user's mistake.

Every room raises :class:`InputError` for bad input (a file, row, key or value the user gave);
the command line turns it into one sentence on stderr and exit status 2. Anything else that
escapes is a bug in selfcal and keeps its traceback.
"""


class InputError(Exception):
    """Bad input from the user: the message is one sentence naming the file, row or key."""
