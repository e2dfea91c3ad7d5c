"""The encoding of a zero-copy buffer's published address (ts_abi.h, TS_CTL_PUB), run on the host.

A publisher writes two 64-bit words with one 16-byte store, each carrying half of the address under a 32-bit
tag of its launch number; a reader accepts the pair only when both words carry its own launch's tag, because
the hardware makes each 8-byte word, not the pair, single-copy atomic. The helpers (tilescale_device.cuh,
`__host__ __device__`) are compiled with nvcc into a host program and run over random addresses and launch
numbers, including torn pairs (one word of an earlier launch) and the words' state before any publish (zero).
The GPU suites (two PEs sharing a GPU) run the same helpers in every call-free kernel with zero-copy params.
"""

from __future__ import annotations

import random
import subprocess

from jax_tilescale.codegen.cuda import device_header
from jax_tilescale.compiler.toolchain import find_nvcc

MASK32 = (1 << 32) - 1


def _tag(seq: int) -> int:
    """The documented tag: the launch number modulo 2^32 - 1, plus one (never 0)."""
    return seq % MASK32 + 1


def _cases() -> list[tuple[int, int]]:
    rng = random.Random(20261203)
    seqs = [1, 2, MASK32 - 1, MASK32, MASK32 + 1, 1 << 32, (1 << 32) + 1, (1 << 63) - 1, (1 << 64) - 1]
    seqs += [rng.randrange(1, 1 << 64) for _ in range(40)]
    addrs = [0x7F00_0000_0000, 0x7F00_0000_0001, 1 << 47, 0xFFFF_FFFF, 1 << 32, (1 << 64) - 2]
    addrs += [rng.randrange(1, 1 << 48) & ~0xF | rng.randrange(2) for _ in range(40)]
    return [(a, s) for a in addrs for s in rng.sample(seqs, 8)]


def _program(cases: list[tuple[int, int]]) -> str:
    rows = ",\n".join(f"  {{{a}ull, {s}ull}}" for a, s in cases)
    return "\n".join([
        "#define TS_USES_NVSHMEM 0",
        device_header(),
        "#include <cstdio>",
        f"static const unsigned long long kCases[][2] = {{\n{rows}\n}};",
        "int main() {",
        "  for (const auto& c : kCases) {",
        "    const uint64_t at = c[0], seq = c[1];",
        "    uint64_t w0, w1, got = 0, old0, old1, torn = 0, zero = 0;",
        "    ts_pub_words(at, seq, w0, w1);",
        "    const bool ok = ts_pub_read(w0, w1, seq, got);",
        "    ts_pub_words(at ^ 0x100ull, seq - 1, old0, old1);  // the same slot, one launch earlier",
        "    const bool torn_a = ts_pub_read(w0, old1, seq, torn), torn_b = ts_pub_read(old0, w1, seq, torn);",
        "    const bool stale = ts_pub_read(old0, old1, seq, torn), later = ts_pub_read(w0, w1, seq - 1, torn);",
        "    const bool before_any = ts_pub_read(0ull, 0ull, seq, zero);",
        '    printf("%u %llu %llu %llu %d %d %d %d %d %d\\n", ts_pub_tag(seq), (unsigned long long)w0,',
        "           (unsigned long long)w1, (unsigned long long)got, ok, torn_a, torn_b, stale, later, before_any);",
        "  }",
        "  return 0;",
        "}",
    ])


def test_published_pair_round_trips_and_rejects_torn_stale_and_unwritten_words(tmp_path, require_nvcc):
    cases = _cases()
    src = tmp_path / "pub_words.cu"
    src.write_text(_program(cases))
    exe = tmp_path / "pub_words"
    build = subprocess.run([str(find_nvcc().path), "-std=c++17", "-arch=sm_90", "-o", str(exe), str(src)],
                           check=False, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    assert len([line for line in out if line]) == len(cases)
    for (addr, seq), line in zip(cases, out):
        tag, w0, w1, got, ok, torn_a, torn_b, stale, later, before_any = (int(x) for x in line.split())
        where = f"address {addr:#x}, launch {seq}"
        assert tag == _tag(seq) and tag != 0, where
        assert w0 == (tag << 32) | (addr & MASK32) and w1 == (tag << 32) | (addr >> 32), where
        assert ok == 1 and got == addr, where
        # a pair with one word (or both) of the launch before is refused, as is this launch's pair read
        # by the launch before it and the zero words no launch has written yet
        assert (torn_a, torn_b, stale, later, before_any) == (0, 0, 0, 0, 0), where
