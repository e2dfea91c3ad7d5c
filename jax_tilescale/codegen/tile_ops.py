"""CUDA rules of the element-wise tile statements (ir/tile_ops.py) and the C spelling of values
(ir/values.py); helpers in tilescale_tile_ops.cuh. The interpreter (interpret/tile_ops.py) is the
reference; this follows it:

- `T.Parallel`: iteration k of the flattened (row-major) space runs on thread k mod threads, one
  after the other; the loop variables are int64 (`var_name`); a block barrier (`ctx.block_sync`) follows.
  Fragments these statements touch live in shared memory (row-major, `ctx.pointers`).
- Values are C expressions of type float (16- and 32-bit floats), double or int64_t (bool for
  conditions), converted exactly as `convert` in the interpreter does; + - * / use the `_rn`
  intrinsics (no FMA contraction), so they match numpy bit for bit.
- Element indices that `value_bounds` (a sound interval enclosure) cannot prove in bounds are checked
  by the thread using them (`ts_elem_index`, a trap without a block barrier; its noinline call would
  serialize a kernel's wgmma pipeline, ptxas C7510, so every proof saved counts).
- An `if` in a Parallel body is a C `if`/`else` inside the iteration (per iteration, no barrier);
  its condition is printed like any value (element values in their compute type, as `T.where`'s).
- Element stores and atomics outside a Parallel run on thread 0, then the block meets (the shape
  codegen/control.py makes per-thread inside thread-dependent ifs).
- Reductions: one warp per output element (lanes stride over the reduced dimension, then a
  butterfly of shuffles), in the interpreter's compute type; atomics: `ts_atomic_*`.
- cumsum: one thread per line along the summed dimension, adding in order (`__fadd_rn`, so the
  sums are the interpreter's bit for bit) and storing each prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import KernelTraceError
from ..ir.control import THREAD_VAR, If
from ..ir.expr import Expr, Var
from ..ir.guards import branch_ranges
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Loop, Region, Stmt
from ..ir.ranges import value_bounds
from ..ir.tile_ops import AtomicElement, AtomicRegion, CumSum, FetchAdd, Parallel, Reduce, ReduceKind, Store
from ..ir.values import (
    BFLOAT16,
    BOOL,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    INT64,
    Binary,
    BinaryKind,
    Cast,
    ElementRead,
    IndexValue,
    Literal,
    Unary,
    UnaryKind,
    Value,
    ValueCompare,
    ValueSelect,
    compute_dtype,
)
from ..ir.verify_base import var_ranges
from .body import EMIT, EmitKind
from .common import INDENT, indent, index_type, thread0
from .context import Ctx
from .expr_printer import WHERE_NAME, c_expr, var_name
from .regions import row_major_strides

STORAGE_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float", np.dtype(np.float64): "double", FLOAT16: "__half", BFLOAT16: "__nv_bfloat16",
    np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t", np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t", BOOL: "uint8_t",
}
REP_TYPES = {BOOL: "bool", INT64: "int64_t", FLOAT32: "float", FLOAT64: "double"}


def rep_type(dtype: np.dtype) -> str:
    return REP_TYPES[compute_dtype(dtype)]


def storage_type(dtype: np.dtype, loc: object = None) -> str:
    try:
        return STORAGE_TYPES[dtype]
    except KeyError:
        raise KernelTraceError(f"the CUDA code generator has no element type for {dtype.name}", loc) from None


# ---- values ---------------------------------------------------------------------------------------


def float_literal(value: float, dtype: np.dtype) -> str:
    """An exact C literal of `value` (already representable) as float or double."""
    if dtype == FLOAT64:
        if math.isfinite(value):
            return repr(float(value))
        return f"__longlong_as_double({int(np.float64(value).view(np.int64))}LL)"
    x = np.float32(value)
    if math.isfinite(x):
        return repr(float(x)) + "f"
    return f"__int_as_float({int(x.view(np.int32))})"


def _literal(v: Literal) -> str:
    d = compute_dtype(v.dtype)
    if d == BOOL:
        return "true" if v.value else "false"
    if d == INT64:
        value = int(v.value)
        return "(-9223372036854775807LL - 1)" if value == -(2**63) else f"((int64_t){value}LL)"
    return float_literal(float(v.value), d)


def convert(x: str, src: np.dtype, dst: np.dtype) -> str:
    """C for `convert` of the interpreter: a value of type `src` (in its compute type) as `dst`
    (in dst's compute type)."""
    s, d = compute_dtype(src), compute_dtype(dst)
    if dst == BOOL:
        return f"(({x}) != 0)"
    if dst.kind in "iu":
        t = storage_type(dst)
        inner = f"(int64_t)({x})" if s != INT64 else f"({x})"
        return inner if t == "int64_t" else f"((int64_t)({t}){inner})"
    if dst == FLOAT16:
        return f"__half2float(__float2half_rn((float)({x})))"
    if dst == BFLOAT16:
        return f"__bfloat162float(__float2bfloat16_rn((float)({x})))"
    return f"({x})" if s == d else f"(({REP_TYPES[d]})({x}))"


def to_storage(x: str, src: np.dtype, dst: np.dtype) -> str:
    """A value of type `src` as a stored element of `dst`."""
    if dst == FLOAT16:
        return f"__float2half_rn((float)({x}))"
    if dst == BFLOAT16:
        return f"__float2bfloat16_rn((float)({x}))"
    if dst == BOOL:
        return f"(uint8_t)(({x}) != 0)"
    t = storage_type(dst)
    if dst.kind in "iu":
        inner = f"(int64_t)({x})" if compute_dtype(src) != INT64 else f"({x})"
        return f"({t})({inner})"
    return f"({t})({x})"


_FLOAT_OPS = {BinaryKind.ADD: "__fadd_rn", BinaryKind.SUB: "__fsub_rn", BinaryKind.MUL: "__fmul_rn",
              BinaryKind.DIV: "__fdiv_rn", BinaryKind.MAX: "ts_vmax", BinaryKind.MIN: "ts_vmin"}
_DOUBLE_OPS = {BinaryKind.ADD: "__dadd_rn", BinaryKind.SUB: "__dsub_rn", BinaryKind.MUL: "__dmul_rn",
               BinaryKind.DIV: "__ddiv_rn", BinaryKind.MAX: "ts_vmax", BinaryKind.MIN: "ts_vmin"}
_INT_OPS = {BinaryKind.ADD: "ts_iadd", BinaryKind.SUB: "ts_isub", BinaryKind.MUL: "ts_imul",
            BinaryKind.MAX: "ts_vmax", BinaryKind.MIN: "ts_vmin"}
_UNARY_FLOAT = {UnaryKind.ABS: "fabsf", UnaryKind.EXP: "expf", UnaryKind.EXP2: "exp2f", UnaryKind.LOG: "logf"}
_UNARY_DOUBLE = {UnaryKind.ABS: "fabs", UnaryKind.EXP: "exp", UnaryKind.EXP2: "exp2", UnaryKind.LOG: "log"}


class ValuePrinter:
    """C expressions of values and element addresses inside one statement. `ranges`: the known
    ranges of the variables in scope (indices provably in bounds are not checked again)."""

    def __init__(self, ctx: Ctx, ranges: dict[Var, tuple[int, int]]):
        self.ctx, self.ranges = ctx, ranges

    def element(self, region: Region, loc: object) -> str:
        """`typed_base[offset]` of a one-element region (an lvalue)."""
        buf = region.buffer
        strides = row_major_strides(buf.shape)
        terms = []
        for start, extent, stride in zip(region.starts, buf.shape, strides):
            index = c_expr(start)
            rng = value_bounds(start, self.ranges)  # a sound enclosure: inside it, no check is needed
            if rng is None or rng[0] < 0 or rng[1] >= extent:
                index = f"ts_elem_index({index}, {extent}, {WHERE_NAME})"
            if index != "0":
                terms.append(f"(int64_t){index}" if stride == 1 else f"(int64_t){index} * {stride}")
        t = storage_type(buf.dtype, loc)
        return f"reinterpret_cast<{t}*>({self.ctx.pointers[buf]})[{' + '.join(terms) or '0'}]"

    def value(self, v: Value, loc: object = None) -> str:
        """`v` as a C expression of its compute type."""
        return _VALUE_RULES[type(v)](self, v, loc)

    def operand(self, v: Value, to: np.dtype, loc: object) -> str:
        return convert(self.value(v, loc), v.dtype, to) if compute_dtype(v.dtype) != compute_dtype(to) else \
            self.value(v, loc)


def _read(p: ValuePrinter, v: ElementRead, loc: object) -> str:
    element = p.element(v.region, loc)
    return f"({element} != 0)" if v.dtype == BOOL else f"ts_rep({element})"


def _unary(p: ValuePrinter, v: Unary, loc: object) -> str:
    x = p.operand(v.x, v.dtype, loc)
    d = compute_dtype(v.dtype)
    if v.op is UnaryKind.NOT:
        return f"(!{x})"
    if v.op is UnaryKind.NEG:
        return f"ts_ineg({x})" if d == INT64 else f"(-{x})"
    if d == INT64:  # ABS (the verifier's types give no other integer unary)
        return f"ts_iabs({x})"
    return f"{(_UNARY_DOUBLE if d == FLOAT64 else _UNARY_FLOAT)[v.op]}({x})"


def _binary(p: ValuePrinter, v: Binary, loc: object) -> str:
    if v.op in (BinaryKind.AND, BinaryKind.OR):
        return f"({p.value(v.lhs, loc)} {v.op.value} {p.value(v.rhs, loc)})"
    a, b = p.operand(v.lhs, v.dtype, loc), p.operand(v.rhs, v.dtype, loc)
    d = compute_dtype(v.dtype)
    fn = (_DOUBLE_OPS if d == FLOAT64 else _FLOAT_OPS if d == FLOAT32 else _INT_OPS)[v.op]
    return f"{fn}({a}, {b})"


def _select(p: ValuePrinter, v: ValueSelect, loc: object) -> str:
    """`c ? a : b`; each side's reads are checked under what its side knows (`j < n ? x[i, j] : 0`
    needs no check of j where the verifier's ranges prove it)."""
    then_ranges, else_ranges = branch_ranges(v.cond, p.ranges)
    a = ValuePrinter(p.ctx, then_ranges).operand(v.if_true, v.dtype, loc)
    b = ValuePrinter(p.ctx, else_ranges).operand(v.if_false, v.dtype, loc)
    return f"({p.value(v.cond, loc)} ? {a} : {b})"


_VALUE_RULES: dict[type, Callable[[ValuePrinter, object, object], str]] = {
    Literal: lambda p, v, loc: _literal(v),
    IndexValue: lambda p, v, loc: f"({c_expr(v.expr)} != 0)" if v.dtype == BOOL else f"((int64_t)({c_expr(v.expr)}))",
    ElementRead: _read,
    Unary: _unary,
    Binary: _binary,
    ValueCompare: lambda p, v, loc: (f"({p.operand(v.lhs, v.operand_dtype, loc)} {v.cmp.value} "
                                     f"{p.operand(v.rhs, v.operand_dtype, loc)})"),
    ValueSelect: _select,
    Cast: lambda p, v, loc: convert(p.value(v.x, loc), v.x.dtype, v.dtype),
}


# ---- statements ----------------------------------------------------------------------------------


def enclosing_ranges(kernel: KernelIR, target: Stmt) -> dict[Var, tuple[int, int]]:
    """Ranges of the block index, the PE, tx and the variables of the loops around `target`, cut
    by the conditions of the ifs around it (as the verifier's, so what it proved needs no check)."""
    ranges = {**var_ranges(kernel), THREAD_VAR: (0, kernel.threads - 1)}

    def find(body: tuple[Stmt, ...], acc: dict[Var, tuple[int, int]]) -> dict | None:
        for s in body:
            if s is target:
                return acc
            inner = dict(acc)
            if isinstance(s, Loop):
                inner[s.var] = (0, s.extent - 1)
            elif isinstance(s, Parallel):
                inner.update({v: (0, e - 1) for v, e in zip(s.vars, s.extents)})
            bodies = s.bodies
            sides = branch_ranges(s.cond, inner) if isinstance(s, If) else (inner,) * len(bodies)
            for nested, side in zip(bodies, sides):
                found = find(nested, side)
                if found is not None:
                    return found
        return None

    return find(kernel.body, ranges) or ranges


def condition(cond: Expr | Value, p: ValuePrinter, loc: object) -> str:
    """An if's condition as a C boolean: an element value in its compute type (as T.where's), or
    an index condition."""
    return p.value(cond, loc) if isinstance(cond, Value) else f"{c_expr(cond)} != 0"


def _thread_lines(body: tuple[Stmt, ...], p: ValuePrinter) -> list[str]:
    """What one thread does for the statements of `body` (of a Parallel body, or a block-level
    element op), with their ITERATION rules."""
    return [line for s in body for line in EMIT.lookup(s, EmitKind.ITERATION)(s, p)]


@EMIT.register(Loop, kind=EmitKind.ITERATION)
def _loop_lines(s: Loop, p: ValuePrinter) -> list[str]:
    i = var_name(s.var)
    body = _thread_lines(s.body, ValuePrinter(p.ctx, {**p.ranges, s.var: (0, s.extent - 1)}))
    return [f"for (int64_t {i} = 0; {i} < {s.extent}; ++{i}) {{", *indent(body), "}"]


@EMIT.register(If, kind=EmitKind.ITERATION)
def _if_lines(s: If, p: ValuePrinter) -> list[str]:
    """Per iteration: a plain C if (the verifier admits only per-iteration statements)."""
    then_ranges, else_ranges = branch_ranges(s.cond, p.ranges)
    then_lines = _thread_lines(s.then_body, ValuePrinter(p.ctx, then_ranges))
    else_lines = _thread_lines(s.else_body, ValuePrinter(p.ctx, else_ranges))
    lines = [f"if ({condition(s.cond, p, s.loc)}) {{", *indent(then_lines)]
    return lines + (["} else {", *indent(else_lines), "}"] if else_lines else ["}"])


@EMIT.register(Store, kind=EmitKind.ITERATION)
def _store_lines(s: Store, p: ValuePrinter) -> list[str]:
    dst = s.dst.buffer.dtype
    return [f"{p.element(s.dst, s.loc)} = {to_storage(p.value(s.value, s.loc), s.value.dtype, dst)};"]


@EMIT.register(AtomicElement, kind=EmitKind.ITERATION)
def _atomic_lines(s: AtomicElement, p: ValuePrinter) -> list[str]:
    dst = s.dst.buffer.dtype
    value = to_storage(p.value(s.value, s.loc), s.value.dtype, dst)
    return [f"ts_atomic_{s.op.value}(&{p.element(s.dst, s.loc)}, {value});"]


@EMIT.register(Parallel)
def emit_parallel(s: Parallel, ctx: Ctx) -> list[str]:
    ranges = {**enclosing_ranges(ctx.kernel, s), **{v: (0, e - 1) for v, e in zip(s.vars, s.extents)}}
    p = ValuePrinter(ctx, ranges)
    total = math.prod(s.extents)
    threads = ctx.kernel.threads
    idx = index_type(total + threads)
    coords = []
    rest = 1
    for var, extent in reversed(list(zip(s.vars, s.extents))):
        quotient = "ts_it" if rest == 1 else f"(ts_it / {rest}u)"
        coord = quotient if extent * rest == total else f"{quotient} % {extent}u"  # row-major digits
        coords.append(f"const int64_t {var_name(var)} = {coord};")
        rest *= extent
    body = _thread_lines(s.body, p)
    return [
        f"for ({idx} ts_it = threadIdx.x; ts_it < {total}u; ts_it += {threads}u) {{",
        *indent(list(reversed(coords))),
        *indent(body),
        "}",
        *ctx.block_sync(),
    ]


@EMIT.register(Store, AtomicElement)
def emit_once(s: Store | AtomicElement, ctx: Ctx) -> list[str]:
    """An element store or atomic outside a Parallel: thread 0, then the block meets."""
    p = ValuePrinter(ctx, enclosing_ranges(ctx.kernel, s))
    return [*thread0(ctx, _thread_lines((s,), p)), *ctx.block_sync()]


def _offset(region: Region, counter: str, sizes: tuple[int, ...], dims: tuple[int, ...]) -> str:
    """The element offset in `region`'s buffer of the element whose coordinates along `dims` (its
    dimensions of size > 1, in order) are the row-major digits of `counter` over `sizes`."""
    strides = row_major_strides(region.buffer.shape)
    terms = [f"(int64_t)({c_expr(start)}) * {stride}" for start, stride in zip(region.starts, strides)
             if c_expr(start) != "0"]
    rest = math.prod(sizes)
    for k, (dim, size) in enumerate(zip(dims, sizes)):
        rest //= size
        q = counter if rest == 1 else f"({counter} / {rest}u)"
        digit = q if k == 0 else f"({q} % {size}u)"
        terms.append(f"(int64_t){digit}" + ("" if strides[dim] == 1 else f" * {strides[dim]}"))
    return " + ".join(terms) or "0"


def _big_dims(sizes: tuple[int, ...], skip: int | None = None) -> tuple[int, ...]:
    return tuple(d for d, n in enumerate(sizes) if n != 1 and d != skip)


_IDENTITY = {
    (ReduceKind.SUM, "float"): "0.0f", (ReduceKind.SUM, "double"): "0.0", (ReduceKind.SUM, "int64_t"): "((int64_t)0)",
    (ReduceKind.ABSMAX, "float"): "0.0f", (ReduceKind.ABSMAX, "double"): "0.0",
    (ReduceKind.ABSMAX, "int64_t"): "((int64_t)0)",
    (ReduceKind.MAX, "float"): "__int_as_float((int)0xff800000u)",  # -inf
    (ReduceKind.MAX, "double"): "__longlong_as_double((long long)0xfff0000000000000ull)",
    (ReduceKind.MAX, "int64_t"): "(-9223372036854775807LL - 1)",
    (ReduceKind.MIN, "float"): "__int_as_float(0x7f800000)",  # +inf
    (ReduceKind.MIN, "double"): "__longlong_as_double(0x7ff0000000000000LL)",
    (ReduceKind.MIN, "int64_t"): "9223372036854775807LL",
}


@EMIT.register(Reduce)
def emit_reduce(s: Reduce, ctx: Ctx) -> list[str]:
    acc = s.acc_dtype
    at = REP_TYPES[acc]
    combine = {ReduceKind.SUM: "ts_iadd" if acc == INT64 else "", ReduceKind.MIN: "ts_vmin"}.get(s.kind, "ts_vmax")

    def comb(a: str, b: str) -> str:
        return f"({a} + {b})" if combine == "" else f"{combine}({a}, {b})"

    kept = _big_dims(s.src.sizes, skip=s.dim)
    out_sizes = tuple(s.src.sizes[d] for d in kept)
    nout = math.prod(out_sizes)
    reduced = s.src.sizes[s.dim]
    src_strides = row_major_strides(s.src.buffer.shape)
    warps = ctx.kernel.threads // 32
    load = convert(f"ts_rep(ts_src[ts_sbase + (int64_t)ts_r * {src_strides[s.dim]}])", s.src.buffer.dtype, acc)
    if s.kind is ReduceKind.ABSMAX:
        load = f"ts_iabs({load})" if acc == INT64 else f"{'fabs' if acc == FLOAT64 else 'fabsf'}({load})"
    st, dt = storage_type(s.src.buffer.dtype, s.loc), storage_type(s.dst.buffer.dtype, s.loc)
    result = "ts_acc"
    if not s.clear:
        result = comb(convert("ts_rep(ts_dst[ts_dbase])", s.dst.buffer.dtype, acc), "ts_acc")
    dst_dims = _big_dims(s.dst.sizes)
    return [
        f"const {st}* const ts_src = reinterpret_cast<const {st}*>({ctx.pointers[s.src.buffer]});",
        f"{dt}* const ts_dst = reinterpret_cast<{dt}*>({ctx.pointers[s.dst.buffer]});",
        f"for (uint32_t ts_o = threadIdx.x / 32u; ts_o < {nout}u; ts_o += {warps}u) {{",
        f"{INDENT}const int64_t ts_sbase = {_offset(s.src, 'ts_o', out_sizes, kept)};",
        f"{INDENT}{at} ts_acc = {_IDENTITY[(s.kind, at)]};",
        f"{INDENT}for (uint32_t ts_r = threadIdx.x % 32u; ts_r < {reduced}u; ts_r += 32u) {{",
        f"{INDENT * 2}ts_acc = {comb('ts_acc', load)};",
        f"{INDENT}}}",
        f"{INDENT}for (int ts_s = 16; ts_s > 0; ts_s >>= 1) {{",
        f"{INDENT * 2}ts_acc = {comb('ts_acc', '__shfl_xor_sync(0xffffffffu, ts_acc, ts_s)')};",
        f"{INDENT}}}",
        f"{INDENT}if (threadIdx.x % 32u == 0u) {{",
        f"{INDENT * 2}const int64_t ts_dbase = {_offset(s.dst, 'ts_o', out_sizes, dst_dims)};",
        f"{INDENT * 2}ts_dst[ts_dbase] = {to_storage(result, acc, s.dst.buffer.dtype)};",
        f"{INDENT}}}",
        "}",
        *ctx.block_sync(),
    ]


_ADD = {FLOAT32: "__fadd_rn({}, {})", FLOAT64: "__dadd_rn({}, {})", INT64: "ts_iadd({}, {})"}


@EMIT.register(CumSum)
def emit_cumsum(s: CumSum, ctx: Ctx) -> list[str]:
    acc = s.acc_dtype
    at = REP_TYPES[acc]
    lines_dims = _big_dims(s.src.sizes, skip=s.dim)
    line_sizes = tuple(s.src.sizes[d] for d in lines_dims)
    nlines = math.prod(line_sizes)
    n = s.src.sizes[s.dim]
    src_stride = row_major_strides(s.src.buffer.shape)[s.dim]
    dst_stride = row_major_strides(s.dst.buffer.shape)[s.dim]
    st, dt = storage_type(s.src.buffer.dtype, s.loc), storage_type(s.dst.buffer.dtype, s.loc)
    load = convert(f"ts_rep(ts_src[ts_sbase + ts_k * {src_stride}])", s.src.buffer.dtype, acc)
    index = f"{n - 1} - ts_r" if s.reverse else "ts_r"
    return [
        f"const {st}* const ts_src = reinterpret_cast<const {st}*>({ctx.pointers[s.src.buffer]});",
        f"{dt}* const ts_dst = reinterpret_cast<{dt}*>({ctx.pointers[s.dst.buffer]});",
        f"for (uint32_t ts_l = threadIdx.x; ts_l < {nlines}u; ts_l += {ctx.kernel.threads}u) {{",
        f"{INDENT}const int64_t ts_sbase = {_offset(s.src, 'ts_l', line_sizes, lines_dims)};",
        f"{INDENT}const int64_t ts_dbase = {_offset(s.dst, 'ts_l', line_sizes, lines_dims)};",
        f"{INDENT}{at} ts_acc = {_IDENTITY[(ReduceKind.SUM, at)]};",
        f"{INDENT}for (int64_t ts_r = 0; ts_r < {n}; ++ts_r) {{",
        f"{INDENT * 2}const int64_t ts_k = {index};",
        f"{INDENT * 2}ts_acc = {_ADD[acc].format('ts_acc', load)};",
        f"{INDENT * 2}ts_dst[ts_dbase + ts_k * {dst_stride}] = {to_storage('ts_acc', acc, s.dst.buffer.dtype)};",
        f"{INDENT}}}",
        "}",
        *ctx.block_sync(),
    ]


# atomicAdd's operand type per counting dtype (its 64-bit form is unsigned; two's complement agrees)
_FETCH_ADD_TYPES = {np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int",
                    np.dtype(np.int64): "unsigned long long", np.dtype(np.uint64): "unsigned long long"}


@EMIT.register(FetchAdd)
def emit_fetch_add(s: FetchAdd, ctx: Ctx) -> list[str]:
    """The block meets (its earlier accesses done), thread 0 fences (release), adds, fences again
    (acquire) and writes the old count to shared memory; the block meets again and reads it."""
    p = ValuePrinter(ctx, enclosing_ranges(ctx.kernel, s))
    dtype = s.word.buffer.dtype
    ctype, atype = storage_type(dtype, s.loc), _FETCH_ADD_TYPES[dtype]
    return [
        *ctx.block_sync("every thread's earlier accesses, before the release"),
        *thread0(ctx, [
            "__threadfence();  // release: the block's earlier writes reach the GPU before its count",
            f"{p.element(s.prev, s.loc)} = ({ctype})atomicAdd(reinterpret_cast<{atype}*>("
            f"&{p.element(s.word, s.loc)}), ({atype})({c_expr(s.value)}));",
            "__threadfence();  // acquire: what the earlier counts released, before the block reads it",
        ]),
        *ctx.block_sync("every thread reads the old count"),
    ]


@EMIT.register(AtomicRegion)
def emit_atomic_region(s: AtomicRegion, ctx: Ctx) -> list[str]:
    dst_dims, src_dims = _big_dims(s.dst.sizes), _big_dims(s.src.sizes)
    sizes = tuple(s.dst.sizes[d] for d in dst_dims)
    count = math.prod(sizes)
    idx = index_type(count + ctx.kernel.threads)
    st, dt = storage_type(s.src.buffer.dtype, s.loc), storage_type(s.dst.buffer.dtype, s.loc)
    value = to_storage(convert("ts_rep(ts_src[ts_soff])", s.src.buffer.dtype, s.dst.buffer.dtype), s.dst.buffer.dtype,
                       s.dst.buffer.dtype)
    return [
        f"const {st}* const ts_src = reinterpret_cast<const {st}*>({ctx.pointers[s.src.buffer]});",
        f"{dt}* const ts_dst = reinterpret_cast<{dt}*>({ctx.pointers[s.dst.buffer]});",
        f"for ({idx} ts_e = threadIdx.x; ts_e < {count}u; ts_e += {ctx.kernel.threads}u) {{",
        f"{INDENT}const int64_t ts_soff = {_offset(s.src, 'ts_e', sizes, src_dims)};",
        f"{INDENT}const int64_t ts_doff = {_offset(s.dst, 'ts_e', sizes, dst_dims)};",
        f"{INDENT}ts_atomic_{s.op.value}(&ts_dst[ts_doff], {value});",
        "}",
        *ctx.block_sync(),
    ]
