"""Every CUDA source the test suite generates, hashed: proof that a refactoring left codegen alone.

    python tools/cuda_corpus.py record before.json [pytest args...]   # runs the CPU suite, records
    python tools/cuda_corpus.py compare before.json after.json        # lists what changed

`record` runs pytest with a plugin that wraps `jax_tilescale.codegen.generate_cuda` wherever it was
imported; each call's module (source and launch facts) is keyed by the test that made it, the
kernel's name, the arch and the lowering asked for, and the n-th such call within that test.
`compare` prints the keys whose source or facts differ, and those only one side has, then the
same for the multiset of sources with source locations blanked out (`#line` directives and
`file.py:N` strings), which survives tests being moved or renamed; `--show KEY` prints a unified
diff of one (both records keep the sources).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LOCS = re.compile(r'^[ \t]*#line .*$|[\w./<>-]+\.py:\d+', re.M)


def located_free(source: str) -> str:
    """The source with every user source location blanked (they move when tests are edited)."""
    return _LOCS.sub("<loc>", source)


class CorpusPlugin:
    """A pytest plugin: records every generate_cuda call of the session."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}
        self.counts: Counter[str] = Counter()
        self.current = "<collection>"

    def pytest_configure(self, config) -> None:
        import jax_tilescale.codegen as codegen
        import jax_tilescale.codegen.cuda as cuda

        original = cuda.generate_cuda
        plugin = self

        def recording(kernel, arch: str = "sm_90", gemm_lowering: str | None = None, **options):
            module = original(kernel, arch=arch, gemm_lowering=gemm_lowering, **options)
            plugin.record(kernel.name, arch, gemm_lowering, module)
            return module

        recording.__wrapped__ = original  # type: ignore[attr-defined]
        self._original, self._recording = original, recording
        cuda.generate_cuda = recording
        codegen.generate_cuda = recording

    def _patch_loaded(self) -> None:
        """Replaces the function in every module that bound it by name (`from ... import generate_cuda`)."""
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not d:
                continue
            for name, value in list(d.items()):
                if value is self._original:
                    setattr(mod, name, self._recording)

    def pytest_collection_finish(self, session) -> None:
        self._patch_loaded()

    def pytest_runtest_setup(self, item) -> None:
        self._patch_loaded()  # modules imported lazily by earlier tests
        self.current = item.nodeid

    def record(self, name: str, arch: str, lowering: str | None, module) -> None:
        base = f"{self.current}|{name}|{arch}|{lowering or os.environ.get('TILESCALE_GEMM_LOWERING', 'auto')}"
        self.counts[base] += 1
        key = f"{base}|{self.counts[base]}"
        facts = {f.name: getattr(module, f.name) for f in dataclasses.fields(module) if f.name != "source"}
        facts = json.loads(json.dumps(facts, default=list))
        self.records[key] = {
            "sha256": hashlib.sha256(module.source.encode()).hexdigest(),
            "norm_sha256": hashlib.sha256(located_free(module.source).encode()).hexdigest(),
            "facts": facts,
            "source": module.source,
        }


def record(out: str, pytest_args: list[str]) -> int:
    import pytest

    plugin = CorpusPlugin()
    status = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args], plugins=[plugin])
    Path(out).write_text(json.dumps(plugin.records, indent=0, sort_keys=True))
    distinct = len({r["sha256"] for r in plugin.records.values()})
    print(f"cuda_corpus: {len(plugin.records)} generated modules ({distinct} distinct sources) -> {out}")
    return int(status)


def _test_file(key: str) -> str:
    return key.split("::", 1)[0]


def compare(before: str, after: str, show: str | None, same_files: bool = False) -> int:
    a = json.loads(Path(before).read_text())
    b = json.loads(Path(after).read_text())
    if same_files:  # `after` recorded a subset of the suite: compare only the test files it ran
        files = {_test_file(k) for k in b}
        a = {k: v for k, v in a.items() if _test_file(k) in files}
    if show:
        sa, sb = a[show]["source"].splitlines(), b[show]["source"].splitlines()
        sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(sa, sb, "before", "after", lineterm=""))
        return 0
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    changed = [k for k in sorted(a.keys() & b.keys())
               if a[k]["sha256"] != b[k]["sha256"] or a[k]["facts"] != b[k]["facts"]]
    for k in changed:
        what = "source" if a[k]["sha256"] != b[k]["sha256"] else "facts"
        print(f"changed ({what}): {k}")
    for k in only_a:
        print(f"only before: {k}")
    for k in only_b:
        print(f"only after: {k}")
    same = len(a.keys() & b.keys()) - len(changed)
    print(f"cuda_corpus: by test: {same} identical, {len(changed)} changed, {len(only_a)} only before, "
          f"{len(only_b)} only after")
    for r in (*a.values(), *b.values()):  # blanked here, so that records made by older versions compare alike
        r["norm_sha256"] = hashlib.sha256(located_free(r["source"]).encode()).hexdigest()
    na = Counter(r["norm_sha256"] for r in a.values())
    nb = Counter(r["norm_sha256"] for r in b.values())
    lost, new = sorted((na - nb).elements()), sorted((nb - na).elements())
    names: dict[str, str] = {}
    for src in (a, b):
        for k, r in src.items():
            names.setdefault(r["norm_sha256"], k)
    for h in sorted(set(lost)):
        print(f"source only before (locations blanked): {names[h]}")
    for h in sorted(set(new)):
        print(f"source only after (locations blanked): {names[h]}")
    print(f"cuda_corpus: by source, locations blanked: {len(set(na) & set(nb))} distinct sources on both sides, "
          f"{len(set(lost))} only before, {len(set(new))} only after")
    return 1 if changed or only_a or only_b or lost or new else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--show", metavar="KEY")
    c.add_argument("--same-files", action="store_true", help="compare only the test files `after` ran")
    args = p.parse_args()
    if args.cmd == "record":
        os.chdir(ROOT)
        return record(args.out, args.pytest_args)
    return compare(args.before, args.after, args.show, args.same_files)


if __name__ == "__main__":
    sys.exit(main())
