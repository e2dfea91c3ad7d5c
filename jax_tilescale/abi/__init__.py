"""The calling convention's constants, read from ts_abi.h, its one definition.

`ts_abi.h` (package data beside this file) is inlined into every generated kernel and compiled
into the FFI handler; Python takes its numbers from the same text here, so no side can drift
(tests/runtime/test_abi.py checks the compiled handler and the generated code against it).
A leaf module: every layer may import it.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from pathlib import Path

HEADER_NAME = "ts_abi.h"
_DEFINE = re.compile(r"^#define\s+(TS_[A-Z0-9_]+)\s+(\d+)\b", re.MULTILINE)


def header_path() -> Path:
    """Where ts_abi.h is (the handler's build includes it from here too)."""
    return Path(str(importlib.resources.files(__package__).joinpath(HEADER_NAME)))


@functools.cache
def header_text() -> str:
    """The text of ts_abi.h, as the code generator inlines it."""
    return importlib.resources.files(__package__).joinpath(HEADER_NAME).read_text(encoding="utf-8")


def parse_defines(text: str) -> dict[str, int]:
    """Every `#define TS_NAME <integer>` of a header text."""
    found: dict[str, int] = {}
    for name, value in _DEFINE.findall(text):
        if name in found:
            raise ValueError(f"{HEADER_NAME} defines {name} twice")
        found[name] = int(value)
    return found


DEFINES: dict[str, int] = parse_defines(header_text())

ABI_VERSION: int = DEFINES["TS_ABI_VERSION"]  # the handler refuses a call generated for another
MAX_BUFFERS: int = DEFINES["TS_MAX_BUFFERS"]  # kernel inputs plus outputs
LAUNCH_ARGS_BYTES: int = DEFINES["TS_LAUNCH_ARGS_BYTES"]  # sizeof(TsLaunchArgs)
WAIT_FAULT_BYTES: int = DEFINES["TS_WAIT_FAULT_BYTES"]  # sizeof(TsWaitFault)
STAGE_COPY_OUT: int = DEFINES["TS_STAGE_COPY_OUT"]  # `staged` flag: symmetric during the launch, copied out after
STAGE_COPY_IN: int = DEFINES["TS_STAGE_COPY_IN"]  # `staged` flag: symmetric during the launch, copied in before
STAGE_P2P: int = DEFINES["TS_STAGE_P2P"]  # `staged` flag: peers reach it by P2P loads/stores only (zero-copy allowed)
STAGE_KERNEL_OUT: int = DEFINES["TS_STAGE_KERNEL_OUT"]  # `staged` flag: the kernel copies it out itself
STAGE_KERNEL_IN: int = DEFINES["TS_STAGE_KERNEL_IN"]  # `staged` flag: the kernel copies it in itself
MAX_HOMES: int = DEFINES["TS_MAX_HOMES"]  # params with STAGE_KERNEL_IN or STAGE_KERNEL_OUT per kernel, at most
COPY_IN_CHUNK: int = DEFINES["TS_COPY_IN_CHUNK"]  # bytes of a staged input one warp copies in at a time
# Comparison codes of waits by name ("EQ", "NE", "GT", "GE", "LT", "LE"): TsWaitFault.cmp.
CMP_CODES: dict[str, int] = {name[len("TS_CMP_"):]: v for name, v in DEFINES.items() if name.startswith("TS_CMP_")}
FAULT_CHECK: int = DEFINES["TS_FAULT_CHECK"]  # TsWaitFault.cmp of a failed check in a call-free kernel

__all__ = [
    "ABI_VERSION",
    "CMP_CODES",
    "COPY_IN_CHUNK",
    "DEFINES",
    "FAULT_CHECK",
    "LAUNCH_ARGS_BYTES",
    "MAX_BUFFERS",
    "MAX_HOMES",
    "STAGE_COPY_IN",
    "STAGE_COPY_OUT",
    "STAGE_KERNEL_IN",
    "STAGE_KERNEL_OUT",
    "STAGE_P2P",
    "WAIT_FAULT_BYTES",
    "header_path",
    "header_text",
    "parse_defines",
]
