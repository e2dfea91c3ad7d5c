"""The kernel itself: its buffers, statements, launch shape and PE space, and the analyses every
later layer reads from it (which params peers read or write, which are copied in, whether it
communicates). Its statements are the nodes of `nodes.py`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .buffers import Buffer, BufferKind
from .expr import NODE_VARS, loads, variables
from .nodes import UNKNOWN_LOC, SourceLoc, Stmt, stmt_exprs, walk_stmts


@dataclass(frozen=True)
class KernelIR:
    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    allocs: tuple[Buffer, ...]  # SHARED, SIGNAL and SYMMETRIC buffers, in allocation order
    body: tuple[Stmt, ...]
    grid: tuple[int, ...]
    threads: int
    mesh_axes: tuple[str, ...]  # the axes whose devices form the PE space
    num_pes: int  # product of the sizes of `mesh_axes`
    mesh_axis_sizes: tuple[int, ...] = ()  # the size of each of `mesh_axes` (same order)
    loc: SourceLoc = field(compare=False, default=UNKNOWN_LOC)
    # Blocks the GPU code is built to keep on one SM at a time (registers and shared memory per
    # block at most 1/blocks_per_sm of the SM's); the interpreter ignores it.
    blocks_per_sm: int = 1
    # Hopper's consumer schedule for a persistent tile loop: the two consumer warpgroups take alternate
    # tiles whole (codegen/gemm_sm90_pingpong.py) instead of sharing each; the interpreter ignores it.
    pingpong: bool = False
    # Pallas's input_output_aliases as (input index, output index) pairs (`ts.kernel(input_output_aliases=)`):
    # output j is returned in input i's buffer, and inside the kernel both refs name that one memory, so
    # the output starts with the input's contents. Every later layer reads the pairing from here.
    aliases: tuple[tuple[int, int], ...] = ()
    # Blocks per thread-block cluster along each grid axis (`ts.kernel(cluster=)`, ir/cluster.py);
    # () for a kernel without clusters.
    cluster: tuple[int, ...] = ()

    @property
    def params(self) -> tuple[Buffer, ...]:
        """Global buffers in calling-convention order: inputs, then outputs."""
        return self.inputs + self.outputs

    def alias_pairs(self) -> tuple[tuple[Buffer, Buffer], ...]:
        """The aliased (input, output) buffer pairs."""
        return tuple((self.inputs[i], self.outputs[j]) for i, j in self.aliases)

    def memory_of(self, buf: Buffer) -> Buffer:
        """The buffer that holds `buf`'s memory: an aliased input's output (the pair is one memory,
        written through the output ref), any other buffer itself."""
        return dict(self.alias_pairs()).get(buf, buf)

    def peer_memory(self) -> frozenset[Buffer]:
        """The params whose memory peers read or write, an aliased pair counted as its output."""
        return frozenset(self.memory_of(b) for b in self.remote_written() | self.remote_read())

    def copied_in(self) -> frozenset[Buffer]:
        """Params that peers touch whose staged copy (symmetric during the launch) must start with XLA's
        contents: inputs that peers read, and aliased outputs whose memory peers read or write through
        either ref (the elements the kernel leaves alone hold the input's values). An aliased input is
        never staged on its own: the kernel addresses it through its output's pointer."""
        pairs, touched, read = dict(self.alias_pairs()), self.peer_memory(), self.remote_read()
        return frozenset(b for b in self.params if (b.kind is BufferKind.INPUT and b not in pairs and b in read)
                         or (b in pairs.values() and b in touched))

    def remote_written(self) -> frozenset[Buffer]:
        """Global buffers that peers may write (`Stmt.peer_writes`): they must live in symmetric memory."""
        return frozenset(r.buffer for s in walk_stmts(self.body) for r in s.peer_writes())

    def remote_read(self) -> frozenset[Buffer]:
        """Global buffers that peers may read (`Stmt.peer_reads`: gets, loads through `nvshmem_ptr`,
        remote waits): they must live in symmetric memory too, inputs with their contents copied in."""
        return frozenset(r.buffer for s in walk_stmts(self.body) for r in s.peer_reads())

    def loaded(self) -> frozenset[Buffer]:
        """Buffers the kernel reads as index values (`T.load`, register reads)."""
        return frozenset(ld.buffer for s in walk_stmts(self.body) for e in stmt_exprs(s) for ld in loads(e))

    def uses_nvshmem(self) -> bool:
        return any(s.communicates for s in walk_stmts(self.body)) or any(
            b.kind in (BufferKind.SIGNAL, BufferKind.SYMMETRIC) for b in self.allocs
        ) or self.reads_node()

    def reads_node(self) -> bool:
        """Whether an index expression reads the node index or count (`T.Scale("node")`): the GPU
        asks NVSHMEM for them."""
        return any(v in NODE_VARS for s in walk_stmts(self.body) for e in stmt_exprs(s) for v in variables(e))
