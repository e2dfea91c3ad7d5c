"""Writes tools/proto/gemm_ws.cu: a hand-written prototype of the warp-specialised sm_90a GEMM the
code generator emits for `T.Pipelined` + `T.gemm` (cp.async producer warpgroup, wgmma consumers),
with a correctness check against a naive kernel and CUDA-event timing. Development aid only."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from jax_tilescale.codegen.wgmma import wgmma_wrapper

here = pathlib.Path(__file__).parent
header = (here.parents[1] / "jax_tilescale/codegen/tilescale_sm90.cuh").read_text()
wrappers = "\n".join(wgmma_wrapper(n, "bf16", False, True) for n in (128, 256))
for name in ("gemm_ws", "gemm_tma"):
    (here / f"{name}.cu").write_text((here / f"{name}_template.cu").read_text()
                                     .replace("//@SM90@", header).replace("//@WGMMA@", wrappers))
