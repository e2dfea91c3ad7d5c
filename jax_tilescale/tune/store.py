"""The autotuner's choices on disk, beside the compiled kernels: `<cache root>/tune/<name>-<hash>.json`, one file per
problem (the cache root of jax_tilescale/compiler/cache.py: $TILESCALE_CACHE_DIR or ~/.cache/jax_tilescale).

The hash covers everything that may change which candidate is fastest: the tuned function's name, the candidates'
labels, the arguments' shapes and dtypes, the device's kind and count of SMs, jax_tilescale's and jax's versions,
and what the caller adds. The file itself is JSON a person can read: that key, the choice, every candidate's median
seconds and every refusal's reason. Written atomically (a reader sees the old file or the new one); a file that
cannot be read or does not hold a choice among today's candidates is ignored with a warning and tuned again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..compiler.cache import cache_key, cache_root, lock_file, write_atomic

RECORD_FORMAT = 1  # bump when a record's fields change meaning


@dataclass(frozen=True)
class Record:
    """One tuned problem: the label chosen, the median seconds per call of each candidate timed, the reason each
    refused candidate gave, and when and where it was measured."""

    choice: str
    seconds: Mapping[str, float]
    refused: Mapping[str, str] = field(default_factory=dict)
    device: str = ""
    made: str = ""

    def __post_init__(self) -> None:
        if self.choice not in self.seconds:
            raise ValueError(f"a tuning record's choice {self.choice!r} was not timed: {sorted(self.seconds)}")


def record_path(name: str, key: Mapping[str, object], root: Path | None = None) -> Path:
    """Where the record of `name` at `key` lives (module doc)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:64] or "tuned"
    digest = cache_key(kind="tune", record_format=RECORD_FORMAT, name=name, key=dict(key))[:20]
    return (root or cache_root()) / "tune" / f"{stem}-{digest}.json"


@contextlib.contextmanager
def tuning(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Held while one process tunes the problem whose record is `path` (a lock file beside it): a second process
    (another rank on the same host) waits, then finds the record the first wrote, so that every process takes the
    same configuration and only one times them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with lock_file(path.with_suffix(".lock"), on_wait):
        yield


def load(path: Path, labels: Sequence[str]) -> Record | None:
    """The record at `path` when there is one whose choice is among `labels`; None (with a warning for a file that is
    there but unusable) otherwise."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        warnings.warn(f"autotune: cannot read {path} ({err}); tuning again", RuntimeWarning, stacklevel=3)
        return None
    try:
        data = json.loads(text)
        record = Record(choice=data["choice"], seconds={str(k): float(v) for k, v in data["seconds"].items()},
                        refused=dict(data.get("refused", {})), device=str(data.get("device", "")),
                        made=str(data.get("made", "")))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        warnings.warn(f"autotune: {path} is not a tuning record ({type(err).__name__}: {err}); tuning again",
                      RuntimeWarning, stacklevel=3)
        return None
    if record.choice not in labels:
        warnings.warn(f"autotune: {path} chose {record.choice!r}, which is not a candidate now; tuning again",
                      RuntimeWarning, stacklevel=3)
        return None
    return record


def save(path: Path, record: Record, key: Mapping[str, object]) -> None:
    """Writes `record` (and the key it answers, for a reader) at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"key": dict(key), **asdict(record)}
    write_atomic(path, (json.dumps(data, indent=1, sort_keys=True, default=str) + "\n").encode())


def today() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
