"""The calling convention has one definition, jax_tilescale/abi/ts_abi.h: the generated kernels
inline it, the handler is compiled from it, Python reads its numbers. These tests fail if any
side disagrees or starts repeating it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from jax_tilescale import abi
from jax_tilescale.codegen import LAUNCH_ARGS_BYTES, TS_ABI_VERSION, generate_cuda
from jax_tilescale.codegen.comm import TS_CMP_NAMES
from jax_tilescale.codegen.cuda import TS_MAX_BUFFERS
from jax_tilescale.runtime.wait_timeout import CMP_SYMBOLS
from tests.conftest import missing_tool, needs_extension

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gxx() -> str:
    path = shutil.which("g++")
    if path is None:
        missing_tool("g++ is not on the PATH")
    return path


def test_python_reads_the_header() -> None:
    text = abi.header_text()
    assert abi.header_path().read_text() == text
    assert f"#define TS_ABI_VERSION {abi.ABI_VERSION}\n" in text
    assert (TS_ABI_VERSION, TS_MAX_BUFFERS, LAUNCH_ARGS_BYTES) == (abi.ABI_VERSION, abi.MAX_BUFFERS,
                                                                    abi.LAUNCH_ARGS_BYTES)
    assert abi.CMP_CODES == {"EQ": 0, "NE": 1, "GT": 2, "GE": 3, "LT": 4, "LE": 5}
    assert (abi.STAGE_COPY_OUT, abi.STAGE_COPY_IN) == (1, 2)
    with pytest.raises(ValueError, match="twice"):
        abi.parse_defines("#define TS_A 1\n#define TS_A 2\n")


def test_comparison_codes_agree_with_codegen_and_the_watcher() -> None:
    for cmp, name in TS_CMP_NAMES.items():  # the device code's template argument, by name
        assert name in abi.DEFINES, name
        assert name == f"TS_CMP_{cmp.name}"
    symbols = {"EQ": "==", "NE": "!=", "GT": ">", "GE": ">=", "LT": "<", "LE": "<="}
    assert {abi.CMP_CODES[n]: s for n, s in symbols.items()} == CMP_SYMBOLS


@needs_extension
def test_compiled_handler_agrees_with_the_header() -> None:
    from jax_tilescale import _ffi

    facts = _ffi.abi_facts()
    assert facts["sizeof(TsLaunchArgs)"] == abi.LAUNCH_ARGS_BYTES
    assert facts["sizeof(TsWaitFault)"] == abi.WAIT_FAULT_BYTES
    assert facts["offsetof(TsLaunchArgs, wait_fault)"] == 40 + 8 * abi.MAX_BUFFERS
    for name in ("TS_ABI_VERSION", "TS_MAX_BUFFERS", "TS_STAGE_COPY_OUT", "TS_STAGE_COPY_IN",
                 *(f"TS_CMP_{n}" for n in abi.CMP_CODES)):
        assert facts[name] == abi.DEFINES[name], name
    assert _ffi.abi_version() == abi.ABI_VERSION and _ffi.max_buffers() == abi.MAX_BUFFERS


def _compile(tmp_path: Path, header: str) -> subprocess.CompletedProcess:
    src = tmp_path / "abi_check.cc"
    src.write_text(header + "\nint main() { return 0; }\n")
    return subprocess.run(["g++", "-std=c++17", "-fsyntax-only", str(src)], capture_output=True, text=True,
                          check=False)


@pytest.mark.usefixtures("gxx")
def test_header_layout_static_asserts_hold_and_catch_a_disagreement(tmp_path: Path) -> None:
    assert _compile(tmp_path, abi.header_text()).returncode == 0
    wrong = abi.header_text().replace(f"#define TS_LAUNCH_ARGS_BYTES {abi.LAUNCH_ARGS_BYTES}",
                                      f"#define TS_LAUNCH_ARGS_BYTES {abi.LAUNCH_ARGS_BYTES + 8}")
    out = _compile(tmp_path, wrong)
    assert out.returncode != 0 and "TsLaunchArgs size" in out.stderr
    grown = abi.header_text().replace("uint64_t launch_id;  ", "uint64_t launch_id; uint32_t extra;  ", 1)
    assert grown != abi.header_text()
    assert _compile(tmp_path, grown).returncode != 0


def _kernel_source() -> str:
    import jax
    import jax.numpy as jnp

    import jax_tilescale as ts
    from jax_tilescale import language as T

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=(1,), mesh_axes="x")
    def ring(a, b):
        sig = T.alloc_signal()
        T.putmem_signal_nbi_block(b, a, 64, sig, 1, T.SignalOp.SET, pe=(T.get_pe() + 1) % T.get_pe_num())
        T.signal_wait_until(sig, T.Cmp.GE, 1)

    ir = ring.trace(np.zeros((16,), np.float32), mesh_axes=("x",), num_pes=2)
    return generate_cuda(ir).source


def test_generated_source_inlines_the_header_once() -> None:
    source = _kernel_source()
    assert source.count(abi.header_text()) == 1
    for definition in ("#define TS_ABI_VERSION", "struct TsLaunchArgs {", "struct TsWaitFault {", "#define TS_CMP_GE",
                       "#define TS_MAX_BUFFERS", "#define TS_STAGE_COPY_OUT"):
        assert source.count(definition) == 1, definition
    assert "static_assert(sizeof(TsLaunchArgs) == TS_LAUNCH_ARGS_BYTES" in source


DEFINITION = re.compile(r"(#define\s+TS_(ABI_VERSION|MAX_BUFFERS|CMP_[A-Z]+|STAGE_[A-Z_]+)\b|struct\s+TsLaunchArgs\s*\{"
                        r"|struct\s+TsWaitFault\s*\{|\b(ABI_VERSION|LAUNCH_ARGS_BYTES|STAGE_COPY_(IN|OUT))\s*=\s*\d)")


def test_nothing_else_defines_the_abi() -> None:
    """No other header, source or Python module of the package, the handler or the emulator repeats it."""
    roots = [ROOT / "jax_tilescale", ROOT / "xla_ffi", ROOT / "tests" / "codegen" / "emulator"]
    offenders = []
    for root in roots:
        for path in root.rglob("*"):
            if path.suffix not in (".h", ".cuh", ".cc", ".py", ".inc") or path == abi.header_path():
                continue
            for m in DEFINITION.finditer(path.read_text(encoding="utf-8", errors="replace")):
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not offenders, offenders


def test_docs_state_the_headers_numbers() -> None:
    doc = " ".join((ROOT / "docs" / "calling_convention.md").read_text().split())  # lines rewrapped freely
    assert f"currently **{abi.ABI_VERSION}**" in doc
    assert f"{abi.LAUNCH_ARGS_BYTES} bytes" in doc and f"{abi.WAIT_FAULT_BYTES} bytes" in doc
    assert "jax_tilescale/abi/ts_abi.h" in doc
