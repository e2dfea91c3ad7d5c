"""The on-disk cubin cache: where it is, how entries are keyed, written, checked and locked.

One directory per key (`<root>/<key>/`) holds `<entry>.cu` (the source, kept for reading and
for error messages), `<entry>.cubin` with its checksum `<entry>.cubin.sha256`, `ptxas.txt`
(register and spill report) and `.lock`. Files appear atomically (temporary file, then
`os.replace`), and builders of one key serialise on an `flock` of `.lock`, so threads and
processes sharing the cache never see half an entry. A cubin whose checksum does not match is
treated as absent and rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

CACHE_FORMAT_VERSION = 1  # bump when the layout of an entry or the build changes meaning
_ENV = "TILESCALE_CACHE_DIR"


def _default_root() -> Path:
    return Path(os.environ.get(_ENV) or Path.home() / ".cache" / "jax_tilescale")


@functools.cache
def _fallback_root(wanted: str) -> Path:
    # One private temporary directory per process and unusable root, so the warning is once.
    path = Path(tempfile.mkdtemp(prefix="jax_tilescale-cache-"))
    warnings.warn(
        f"the jax_tilescale kernel cache {wanted} is not writable; compiled kernels go to {path} for this "
        f"process only (set {_ENV} to a writable directory to keep them)",
        RuntimeWarning,
        stacklevel=4,
    )
    return path


def _writable(root: Path) -> bool:
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            pass
        return True
    except OSError:
        return False


def cache_root() -> Path:
    """$TILESCALE_CACHE_DIR or ~/.cache/jax_tilescale; a private temp dir (with a warning) if unwritable."""
    root = _default_root()
    return root if _writable(root) else _fallback_root(str(root))


def cache_key(**parts: object) -> str:
    """sha256 over every input that changes the binary (sorted, JSON-encoded)."""
    blob = json.dumps({"format": CACHE_FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Writes `path` so that readers see the old file or the whole new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes 0600; cache entries are for every reader
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def checksum_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + ".sha256")


def publish(artifact: Path, data: bytes) -> None:
    """Stores `data` at `artifact` with its checksum (checksum first: a cubin is never unverifiable)."""
    write_atomic(checksum_path(artifact), hashlib.sha256(data).hexdigest().encode())
    write_atomic(artifact, data)


def is_valid(artifact: Path) -> bool:
    """True when `artifact` and its checksum are readable and agree."""
    try:
        expected = checksum_path(artifact).read_text().strip()
        return artifact.stat().st_size > 0 and sha256_file(artifact) == expected
    except (OSError, UnicodeDecodeError):
        return False


@contextlib.contextmanager
def locked(entry_dir: Path) -> Iterator[None]:
    """Exclusive lock on one cache entry (threads and processes)."""
    entry_dir.mkdir(parents=True, exist_ok=True)
    with lock_file(entry_dir / ".lock"):
        yield


@contextlib.contextmanager
def lock_file(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Exclusive `flock` of the file at `path` (made if absent) for the block; `on_wait()` is called first when
    another holder makes the caller wait."""
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
