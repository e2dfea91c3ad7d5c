"""Prints the optimised HLO of the jitted GEMM kernel (does XLA add copies around the custom call?)."""
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from gemm import gemm

a = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16)
text = jax.jit(gemm(8192, 8192, 8192)).lower(a, a).compile().as_text()
print("\n".join(line for line in text.splitlines() if "ENTRY" in line or "=" in line)[:3000])
