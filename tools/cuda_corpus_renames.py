"""Whether two CUDA corpora (tools/cuda_corpus.py records) differ only by renamed identifiers.

    python tools/cuda_corpus_renames.py before.json after.json [--same-files] [--allow-wait-ops]

For every key both records hold, the two sources (source locations blanked, as cuda_corpus does)
are split into tokens; they must have the same tokens except identifiers, and the identifiers that
differ must map one to one within that source (`p_in0` -> `p_a` everywhere, never two names to one).
The launch facts must be equal (their text fields, GEMM notes, compared the same way).
`--allow-wait-ops` first folds the word a wait names in its record (`"T.wait_ge on flags[pe]"` ->
`"T.wait_ge"`, issue 13) so that this one known addition is not counted. Prints each key that is
not a pure rename with its first differing token, a summary of the renames, and exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_corpus import _test_file, located_free

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\s+|.", re.S)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WAIT_OP = re.compile(r'"(T\.\w+) on [^"]*"')
_BUFFER_IDENT = re.compile(r"p_|ts_r_|ts_acc_")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def renames(a: str, b: str) -> tuple[dict[str, str] | None, str]:
    """The identifier renaming that turns `a` into `b`, or None and why not.

    Each identifier of `a` must always become the same one of `b` (a buffer identifier of the
    generated code, `p_*`, `ts_r_*`, `ts_acc_*`, strictly; a plain word may also stay itself where
    it is a word of the text, such as "smem" in a comment next to a buffer called `smem` before);
    two renamed identifiers never become the same one; and none becomes a buffer identifier that
    `a` already held. A new name may equal a word `a` holds elsewhere (`extern "C"` next to a
    buffer now called `C`, "signal" in a comment)."""
    ta, tb = _tokens(a), _tokens(b)
    if len(ta) != len(tb):
        return None, f"{len(ta)} tokens before, {len(tb)} after"
    forward: dict[str, str] = {}
    kept: set[str] = set()  # old names also seen unchanged: a word of the text (a comment's "smem")
    for i, (x, y) in enumerate(zip(ta, tb)):
        if x == y and not _IDENT.match(x):
            continue
        if not (_IDENT.match(x) and _IDENT.match(y)):
            return None, f"token {i}: {x!r} -> {y!r} (context: {''.join(ta[max(0, i - 8):i + 8])!r})"
        if x == y and not _BUFFER_IDENT.match(x):
            kept.add(x)
            continue
        if forward.setdefault(x, y) != y:
            return None, f"token {i}: {x!r} -> {y!r}, elsewhere -> {forward[x]!r}"
    forward.update({x: x for x in kept if x not in forward})
    renamed = {x: y for x, y in forward.items() if x != y}
    targets: dict[str, str] = {}
    for x, y in renamed.items():
        if targets.setdefault(y, x) != x:
            return None, f"{targets[y]!r} and {x!r} both become {y!r}"
        if forward.get(y) == y and _BUFFER_IDENT.match(y):
            return None, f"{x!r} becomes {y!r}, a buffer identifier the source already had"
    return renamed, ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--same-files", action="store_true", help="compare only the test files `after` ran")
    p.add_argument("--allow-wait-ops", action="store_true", help="fold the word a wait's record names")
    args = p.parse_args()
    a = json.loads(Path(args.before).read_text())
    b = json.loads(Path(args.after).read_text())
    if args.same_files:
        files = {_test_file(k) for k in b}
        a = {k: v for k, v in a.items() if _test_file(k) in files}
    bad = 0
    renamed: Counter[tuple[str, str]] = Counter()
    identical = pure = 0
    for key in sorted(a.keys() & b.keys()):
        sa, sb = located_free(a[key]["source"]), located_free(b[key]["source"])
        if args.allow_wait_ops:
            sb = _WAIT_OP.sub(r'"\1"', sb)
        fa, fb = json.dumps(a[key]["facts"], sort_keys=True), json.dumps(b[key]["facts"], sort_keys=True)
        if sa == sb and fa == fb:
            identical += 1
            continue
        mapping, why = renames(sa, sb)
        facts_map, facts_why = renames(fa, fb)
        if mapping is None or facts_map is None:
            bad += 1
            print(f"not a rename: {key}: {why or 'facts: ' + facts_why}")
            continue
        pure += 1
        renamed.update(mapping.items())
    only = sorted(a.keys() ^ b.keys())
    for key in only:
        print(f"only {'before' if key in a else 'after'}: {key}")
    common = Counter()
    for (x, y), n in renamed.items():
        common[f"{x} -> {y}"] += n
    print("most frequent renames:", ", ".join(f"{r} ({n})" for r, n in common.most_common(15)))
    print(f"cuda_corpus_renames: {identical} identical, {pure} differ only by renamed identifiers, {bad} otherwise, "
          f"{len(only)} on one side only")
    return 1 if bad or only else 0


if __name__ == "__main__":
    sys.exit(main())
