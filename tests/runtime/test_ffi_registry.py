"""FFI registration on CPU: the extension's absence is a LaunchError with the fix; when built, it imports
here (no GPU, no libcuda) and registers with JAX."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import pytest

from jax_tilescale import abi
from jax_tilescale.errors import LaunchError
from jax_tilescale.runtime import ffi_registry

HAVE_EXTENSION = importlib.util.find_spec("jax_tilescale._ffi") is not None
needs_extension = pytest.mark.skipif(not HAVE_EXTENSION, reason="GPU extension not built")


@pytest.fixture
def fresh_registry(monkeypatch):
    monkeypatch.setattr(ffi_registry, "_registered", False)
    return ffi_registry


def _fail_import(monkeypatch, exc: ImportError) -> None:
    real_import = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name == "jax_tilescale._ffi":
            raise exc
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    monkeypatch.delitem(sys.modules, "jax_tilescale._ffi", raising=False)


def test_missing_extension_names_the_fix(monkeypatch, fresh_registry):
    _fail_import(monkeypatch, ModuleNotFoundError("No module named 'jax_tilescale._ffi'", name="jax_tilescale._ffi"))
    with pytest.raises(LaunchError, match="was not built: reinstall with the CUDA toolkit present") as info:
        fresh_registry.ensure_registered()
    assert "nvcc on PATH" in str(info.value)
    assert not fresh_registry.is_registered()


def test_unloadable_extension_says_to_rebuild(monkeypatch, fresh_registry):
    _fail_import(monkeypatch, ImportError("undefined symbol: _ZN8nanobind6detail"))
    with pytest.raises(LaunchError, match=r"cannot be loaded \(undefined symbol.*pip install -e \."):
        fresh_registry.ensure_registered()


def test_unrelated_missing_module_is_not_disguised(monkeypatch, fresh_registry):
    _fail_import(monkeypatch, ModuleNotFoundError("No module named 'numpy'", name="numpy"))
    with pytest.raises(ModuleNotFoundError, match="numpy"):
        fresh_registry.ensure_registered()


class _HideExtension:
    """A meta-path finder that makes jax_tilescale._ffi unfindable, as on a machine where it was not built."""

    def find_spec(self, name, path=None, target=None):
        if name == "jax_tilescale._ffi":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        # Anything else: None lets the next finder look.


def test_extension_absent_through_the_import_system(monkeypatch, fresh_registry):
    monkeypatch.setattr(sys, "meta_path", [_HideExtension(), *sys.meta_path])
    monkeypatch.delitem(sys.modules, "jax_tilescale._ffi", raising=False)
    import jax_tilescale

    monkeypatch.delattr(jax_tilescale, "_ffi", raising=False)
    with pytest.raises(LaunchError, match="was not built"):
        fresh_registry.ensure_registered()


@needs_extension
def test_extension_imports_without_a_gpu():
    # A fresh interpreter, so nothing else has loaded NVSHMEM or the driver first.
    code = (
        "import jax_tilescale._ffi as m; r = m.registrations(); t = m.type_registrations();"
        "assert sorted(r) == ['execute', 'initialize', 'instantiate'], r;"
        "import ctypes; ptr = ctypes.pythonapi.PyCapsule_GetPointer;"
        "ptr.restype, ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p];"
        "g = m.registrations(graph=True); assert sorted(g) == sorted(r), g;"
        # The graph target shares instantiate and initialize and has its own execute (command-buffer trait).
        "assert [ptr(g[k], None) == ptr(r[k], None) for k in ('instantiate', 'initialize', 'execute')] =="
        " [True, True, False];"
        "assert list(t) == ['jax_tilescale_launch_state'] and sorted(t['jax_tilescale_launch_state']) == "
        "['type_id', 'type_info'], t;"
        "print(m.abi_version(), m.max_buffers(), m.workspace_bytes(), m.nvshmem_initialized());"
        # Importing must load neither NVSHMEM nor the driver: both are looked up when a kernel runs.
        "maps = open('/proc/self/maps').read();"
        "print('libnvshmem_host' in maps, 'libcuda.so' in maps)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(abi.ABI_VERSION), "32", "0", "False", "False", "False"]


@needs_extension
def test_extension_constants_match_the_contract():
    from jax_tilescale import _ffi, abi
    from jax_tilescale.codegen import TS_ABI_VERSION

    assert _ffi.abi_version() == TS_ABI_VERSION == abi.ABI_VERSION  # handler, generated code, attribute
    assert _ffi.max_buffers() == abi.MAX_BUFFERS
    assert _ffi.workspace_alignment() == 256
    assert _ffi.nvshmem_header_version().count(".") == 2
    assert _ffi.loaded_module_count() == 0


@needs_extension
def test_driver_error_is_reported_not_raised():
    from jax_tilescale import _ffi

    err = _ffi.driver_error()
    assert isinstance(err, str)
    try:
        import ctypes

        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert "libcuda.so.1" in err


@needs_extension
def test_ensure_registered_on_cpu(fresh_registry):
    # JAX keeps CUDA registrations until a CUDA backend exists, so this works on a CPU-only machine too.
    ext = fresh_registry.ensure_registered()
    assert fresh_registry.is_registered()
    assert fresh_registry.ensure_registered() is ext  # idempotent
