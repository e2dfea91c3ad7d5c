"""Printed index expressions compute what the interpreter computes (Python's // and %).

The expressions are printed by the code generator, compiled with nvcc into a host program
together with the same device header the kernels use (its helpers are __host__ __device__),
and run over a grid of values, negative ones included, against `ir.expr.evaluate`.
"""

from __future__ import annotations

import itertools
import subprocess

import pytest

from jax_tilescale.codegen.cuda import device_header
from jax_tilescale.codegen.expr_printer import GRID_VAR_NAMES, PE_VAR_NAME, WHERE_NAME, c_expr, const_literal
from jax_tilescale.compiler.toolchain import find_nvcc
from jax_tilescale.ir.evaluate import evaluate
from jax_tilescale.ir.expr import Const, Var, VarKind, expr_max, expr_min

BX, BY, PE = Var(VarKind.PROGRAM_ID, 0), Var(VarKind.PROGRAM_ID, 1), Var(VarKind.PE)

EXPRESSIONS = [
    (BX * 3 - 4) % 4,
    (BX - 5) // 2 + 3,
    (PE - BY) % 3,
    (PE - 7) // -2,
    (BX * 5 - 11) % -4,
    -(BX + 1) // 3,
    (PE * 1000 + BY) // (BY + 7),
    (BX - PE) % (BY + 5),
    expr_min(BX - 2, PE) * expr_max(BY, 1 - BX),
    (BX + BY * 4 + PE * 16) * 268435456 + Const(-(2**40)),  # 64-bit intermediate values
    ((BX - 3) % 5 - 2) // ((PE % 3) + 1),
]
VALUES = range(-3, 5)


def test_literal_spelling():
    assert const_literal(5) == "5" and const_literal(-5) == "(-5)"
    assert const_literal(2**40) == f"{2**40}LL" and const_literal(-(2**31) - 1) == f"({-(2**31) - 1}LL)"


def test_printed_expressions_match_python(tmp_path, require_nvcc):
    lines = [
        "#define TS_USES_NVSHMEM 0",
        device_header(),
        "#include <cstdio>",
        "int main() {",
        f'  const char* {WHERE_NAME} = "test"; (void){WHERE_NAME};',
        (
            f"  for (int64_t {GRID_VAR_NAMES[0]} = {VALUES.start}; {GRID_VAR_NAMES[0]} < {VALUES.stop}; "
            f"++{GRID_VAR_NAMES[0]})"
        ),
        (
            f"  for (int64_t {GRID_VAR_NAMES[1]} = {VALUES.start}; {GRID_VAR_NAMES[1]} < {VALUES.stop}; "
            f"++{GRID_VAR_NAMES[1]})"
        ),
        f"  for (int64_t {PE_VAR_NAME} = {VALUES.start}; {PE_VAR_NAME} < {VALUES.stop}; ++{PE_VAR_NAME}) {{",
    ]
    for e in EXPRESSIONS:
        lines.append(f'    printf("%lld\\n", (long long)({c_expr(e)}));')
    lines += ["  }", "  return 0;", "}"]
    src = tmp_path / "exprs.cu"
    src.write_text("\n".join(lines))
    exe = tmp_path / "exprs"
    nvcc = find_nvcc().path
    cmd = [str(nvcc), "-std=c++17", "-arch=sm_90", "-o", str(exe), str(src)]
    build = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    want = []
    for bx, by, pe in itertools.product(VALUES, VALUES, VALUES):
        env = {BX: bx, BY: by, PE: pe}
        want += [evaluate(e, env) for e in EXPRESSIONS]
    assert got == want


@pytest.mark.parametrize("e", EXPRESSIONS, ids=str)
def test_no_raw_division(e):
    text = c_expr(e)
    assert "/" not in text and "%" not in text
