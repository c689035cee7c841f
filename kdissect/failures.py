"""The one exception type for problems a user caused: an unreadable file, a
file that is not a capture, a bad option value. The CLI prints its message on
one line and exits non-zero; it never shows a traceback for these."""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user (file, format or option); message is one line."""
