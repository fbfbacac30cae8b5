"""Recording: the session format on disk and the sources that fill it."""

from capture.session import Session, SessionWriter, load_session

__all__ = ["Session", "SessionWriter", "load_session"]
