"""What ptxas says of one compiled kernel (the report nvcc.compile_cubin keeps beside each cubin as `ptxas.txt`):
its registers per thread, stack frame and spills, and the "Potential Performance Loss" messages (wgmma instructions
serialized, `setmaxnreg` ignored). Read once here for everyone: the lowering's PerformanceWarning
(`KernelResources.notes`), the benchmarks' resource columns and the tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .nvcc import ptxas_report

_LOSS = re.compile(r"\((C\d+)\) Potential Performance Loss: (.*?)"
                   r"(?: in the function '(\w+)'| for the function '(\w+)')?\.?\s*$")
_PROPERTIES = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
# Losses left out of the notes: C7504 ('setmaxnreg' ignored) comes with every relocatable build, i.e. every kernel
# that references NVSHMEM's device state, whatever the kernel does; what it costs, if anything, shows as spills or
# serialized wgmma, which are noted on their own (benchmarks/NOTES.md, "C7504 is raised by -rdc=true alone").
UNNOTED_LOSSES = frozenset({"C7504"})


@dataclass(frozen=True)
class KernelResources:
    """One kernel's resources as ptxas reports them. `losses`: (code, message) of each "Potential Performance Loss"
    about this kernel or about the whole compilation unit (C7504, `setmaxnreg` ignored, names no function)."""

    registers: int | None = None
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    losses: tuple[tuple[str, str], ...] = ()

    @property
    def wgmma_serialized(self) -> bool:
        return any("wgmma" in message and "serialized" in message for _, message in self.losses)

    def summary(self) -> str:
        """`168 regs, spills 0/0 B` (+ `, wgmma serialized`): the benchmarks' resource column."""
        regs = "?" if self.registers is None else str(self.registers)
        text = f"{regs} regs, spills {self.spill_stores}/{self.spill_loads} B"
        return text + (", wgmma serialized" if self.wgmma_serialized else "")

    def notes(self) -> tuple[str, ...]:
        """Sentences for the kernel's PerformanceWarning: spills and ptxas's performance losses (but UNNOTED_LOSSES);
        none for a kernel ptxas compiled without either."""
        out = []
        if self.spill_stores or self.spill_loads:
            out.append(f"ptxas spills {self.spill_stores} bytes of registers to local memory and loads "
                       f"{self.spill_loads} back ({self.registers} registers per thread): a tile or thread count "
                       f"with fewer values per thread runs without")
        out += [f"ptxas ({code}): {message}" for code, message in self.losses if code not in UNNOTED_LOSSES]
        return tuple(out)


def parse_report(report: str, entry: str) -> KernelResources:
    """The resources of kernel `entry` in a ptxas report (several functions' lines: NVSHMEM's device functions in a
    relocatable build have their own, which are left out)."""
    lines = report.splitlines()
    registers = stack = stores = loads = None
    losses: list[tuple[str, str]] = []
    inside = False  # between "Compiling entry function '<entry>'" and the next function's lines
    for i, line in enumerate(lines):
        if (found := _LOSS.search(line)) is not None:
            code, message, function = found.group(1), found.group(2), found.group(3) or found.group(4)
            if function in (None, entry) and (code, message) not in losses:
                losses.append((code, message))
            continue
        if "Compiling entry function" in line or "Function properties for" in line:
            inside = f"'{entry}'" in line or line.rstrip().endswith(f"for {entry}")
            if inside and "Function properties" in line and i + 1 < len(lines):
                if (props := _PROPERTIES.search(lines[i + 1])) is not None:
                    stack, stores, loads = (int(g) for g in props.groups())
            continue
        if inside and registers is None and (used := _REGISTERS.search(line)) is not None:
            registers = int(used.group(1))
    return KernelResources(registers, stack or 0, stores or 0, loads or 0, tuple(losses))


def kernel_resources(cubin: Path, entry: str) -> KernelResources | None:
    """parse_report of the report kept beside `cubin` (None where there is none)."""
    report = ptxas_report(cubin)
    return None if report is None else parse_report(report, entry)
