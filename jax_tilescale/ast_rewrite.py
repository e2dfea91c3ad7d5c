"""The kernel decorator's rewrite of Python control flow on kernel values.

A kernel function runs once, at trace time, with symbolic values: Python cannot decide
`if tx == 0:` then. So `@ts.kernel` recompiles the function's source with these rewrites
(`language/control.py` holds the functions they call, which act exactly like Python when the
value is a plain one):

    if c: A else: B       ->  for t in branch(c): (if t: A else: B)   (a kernel `c` traces A and B)
    a if c else b         ->  if_else(c, lambda: a, lambda: b)         (T.where on element values)
    a and b / a or b      ->  and_(a, lambda: b) / or_(a, lambda: b)
    not a                 ->  not_(a)
    a < b < c             ->  compare_chain(("<", "<"), lambda: a, lambda: b, lambda: c)
    v = x                 ->  v = assign(lambda: v, x)   (only names bound to T.alloc_var somewhere)

A kernel `c` is an index condition (`tx == 0`, `j < n`) or an element value (`x[i, j] > 0`, or a
mix such as `j < n and x[i, j] > 0`); inside a `T.Parallel` body the traced `if` is per iteration.
An `if` whose branches `return`, `break`, `continue` or `yield` is left alone (it cannot be traced
as a kernel conditional; on a kernel value its truth test is an error). Line numbers are kept, so
IR source locations and tracebacks point at the user's lines. Functions whose source cannot be
read (lambdas, `exec`, the REPL) are used as they are; `with T.If(...)` works there.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import threading
import types
from collections.abc import Callable
from typing import Any

RUNTIME = "_ts_control_"  # the free variable through which rewritten code reaches language/control.py
_BRANCH = "_ts_then_"
_CMP_NAMES = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}


def _call(name: str, *args: ast.expr) -> ast.Call:
    fn = ast.Attribute(value=ast.Name(id=RUNTIME, ctx=ast.Load()), attr=name, ctx=ast.Load())
    return ast.Call(func=fn, args=list(args), keywords=[])


def _thunk(e: ast.expr) -> ast.Lambda:
    no_args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                            defaults=[])
    return ast.Lambda(args=no_args, body=e)


def _escapes(stmts: list[ast.stmt]) -> bool:
    """Whether the statements leave the enclosing `if` other than by falling through."""

    def visit(node: ast.AST, in_loop: bool) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
            return True
        inner = in_loop or isinstance(node, (ast.For, ast.While, ast.AsyncFor))
        return any(visit(child, inner) for child in ast.iter_child_nodes(node))

    return any(visit(s, False) for s in stmts)


def _is_alloc_var(value: ast.expr) -> bool:
    """Whether `value` is a `...alloc_var(...)` call."""
    if not isinstance(value, ast.Call):
        return False
    f = value.func
    return (f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None) == "alloc_var"


def _alloc_var_names(fn: ast.AST) -> set[str]:
    """Names assigned a `...alloc_var(...)` call anywhere in the function."""
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and _is_alloc_var(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


class _Rewriter(ast.NodeTransformer):
    def __init__(self, var_names: set[str]):
        self.var_names = var_names

    def visit_If(self, node: ast.If) -> ast.stmt:
        self.generic_visit(node)
        if _escapes(node.body + node.orelse):
            return node
        inner = ast.If(test=ast.Name(id=_BRANCH, ctx=ast.Load()), body=node.body, orelse=node.orelse)
        loop = ast.For(target=ast.Name(id=_BRANCH, ctx=ast.Store()), iter=_call("branch", node.test),
                       body=[inner], orelse=[])
        return ast.copy_location(loop, node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        return ast.copy_location(_call("if_else", node.test, _thunk(node.body), _thunk(node.orelse)), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        name = "and_" if isinstance(node.op, ast.And) else "or_"
        first, *rest = node.values
        return ast.copy_location(_call(name, first, *(_thunk(v) for v in rest)), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", node.operand), node)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        ops = ast.Tuple(elts=[ast.Constant(_CMP_NAMES[type(op)]) for op in node.ops], ctx=ast.Load())
        operands = [_thunk(e) for e in (node.left, *node.comparators)]
        return ast.copy_location(_call("compare_chain", ops, *operands), node)

    def visit_Assign(self, node: ast.Assign) -> ast.stmt:
        self.generic_visit(node)
        # `v = T.alloc_var(...)` itself stays a plain store (`assign` would rebind to the new
        # register anyway): the allocator reads the name it is stored to (language/naming.py).
        if (len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id in self.var_names
                and not _is_alloc_var(node.value)):
            old = ast.Name(id=node.targets[0].id, ctx=ast.Load())
            node.value = ast.copy_location(_call("assign", _thunk(old), node.value), node.value)
        return node


def _function_def(fn: Callable[..., Any]) -> ast.FunctionDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:  # e.g. a def inside an expression that does not parse on its own
        return None
    if not tree.body or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != fn.__name__:
        return None
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    return tree.body[0]


# CPython 3.11/3.12 convert AST objects with interpreter-wide recursion bookkeeping that is not
# thread-safe ("AST constructor recursion depth mismatch" when two threads parse or compile at
# once, seen with kernels traced from a thread pool): one rewrite at a time.
_AST_LOCK = threading.Lock()


def rewrite_kernel_function(fn: Callable[..., Any], runtime: types.ModuleType) -> Callable[..., Any]:
    """`fn` with its control flow on kernel values traced (see the module doc), or `fn` itself
    when its source is not available. Globals, defaults and closure cells stay `fn`'s own."""
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__wrapped__"):
        return fn
    with _AST_LOCK:
        return _rewrite(fn, runtime)


def _rewrite(fn: types.FunctionType, runtime: types.ModuleType) -> Callable[..., Any]:
    fdef = _function_def(fn)
    if fdef is None:
        return fn
    fdef.decorator_list = []
    fdef = _Rewriter(_alloc_var_names(fdef)).visit(fdef)
    freevars = list(fn.__code__.co_freevars)
    # The function is compiled inside a factory whose parameters are its free variables, so that
    # the names resolve as closure cells (then replaced by fn's own cells) and not as globals.
    params = ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in [RUNTIME, *freevars]], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    factory = ast.FunctionDef(name="_ts_factory_", args=params,
                              body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
                              decorator_list=[], returns=None,
                              **({"type_params": []} if sys.version_info >= (3, 12) else {}))
    ast.copy_location(factory, fdef)
    module = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    code = compile(module, fn.__code__.co_filename, "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    closure = tuple(cells[name] if name in cells else types.CellType(runtime) for name in inner.co_freevars)
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return new
