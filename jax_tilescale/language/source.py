"""Where the user's code is: the line that made an IR node, and whether a frame is the package's own."""

from __future__ import annotations

import os
import sys
from types import FrameType

from ..ir.nodes import UNKNOWN_LOC, SourceLoc

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def in_package(frame: FrameType) -> bool:
    """Whether `frame` runs code of jax_tilescale itself (not the user's)."""
    return os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep)


def user_source_loc() -> SourceLoc:
    """The innermost frame outside this package: the line of the user's kernel."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if not in_package(frame):
            return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return UNKNOWN_LOC
