"""The fast path of a `T.Parallel`'s element accesses: a rectangle, one numpy operation.

Most element accesses of a Parallel name `ref[c0 + i, c1 + j]`: along each dimension of the
buffer, the index is a constant or one loop variable plus a constant (step +1), and each loop
variable appears in at most one dimension. Over a rectangle of iterations (all of them, or the
box of those an `if` keeps, when the kept ones fill their box) such an access touches exactly a
rectangle of the buffer: the interpreter reads or writes it as one slice (a view of the memory,
permuted to the iteration space's axes), logs it as one access, and records the map instead of
per-element coordinates. `tile_ops._IterationLog` materialises the coordinates only when a
buffer's accesses could meet across iterations (a write or atomic, and maps that differ or
that send several iterations to one element); anything else takes the general path
(coordinates per iteration, `tile_ops._rectangles`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Array = np.ndarray


@dataclass(frozen=True)
class RectMap:
    """Iterations `box` (per space axis [lo, hi)) -> elements: along dimension d of the buffer,
    `offsets[d] + x[axes[d]]` (`axes[d]` None: the constant `offsets[d]`)."""

    axes: tuple[int | None, ...]
    offsets: tuple[int, ...]
    box: tuple[tuple[int, int], ...]

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(o + (0 if k is None else self.box[k][0]) for o, k in zip(self.offsets, self.axes))

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(1 if k is None else self.box[k][1] - self.box[k][0] for k in self.axes)

    def injective(self) -> bool:
        """No two iterations of the box touch one element: every axis of extent > 1 is mapped."""
        used = {k for k in self.axes if k is not None}
        return all(k in used or hi - lo == 1 for k, (lo, hi) in enumerate(self.box))

    def same_elements_as(self, other: RectMap) -> bool:
        """Both send an iteration to the same element (whatever their boxes)."""
        return self.axes == other.axes and self.offsets == other.offsets

    def box_index(self) -> tuple[slice, ...]:
        return tuple(slice(lo, hi) for lo, hi in self.box)

    def _dims(self) -> tuple[list[int], list[int]]:
        """The buffer's mapped dimensions in their own order, and sorted by the axis each follows."""
        mapped = [d for d, k in enumerate(self.axes) if k is not None]
        return mapped, sorted(mapped, key=lambda d: self.axes[d])

    def to_space(self, view: Array) -> Array:
        """The region's elements (a view of shape `sizes`) laid out over the space's axes: the
        box's extent along mapped axes, 1 along the others (it broadcasts over them)."""
        mapped, order = self._dims()
        arr = np.transpose(view.reshape([view.shape[d] for d in mapped]), [mapped.index(d) for d in order])
        shape = [1] * len(self.box)
        for d in order:
            shape[self.axes[d]] = view.shape[d]
        return arr.reshape(shape)

    def from_space(self, data: Array) -> Array:
        """Values over the box (its shape) arranged as the region (shape `sizes`); the map must
        be injective (the box's unmapped axes have extent 1)."""
        mapped, order = self._dims()
        sizes = self.sizes
        arr = data.reshape([sizes[d] for d in order])
        return np.transpose(arr, [order.index(d) for d in mapped]).reshape(sizes)

    def coordinates(self) -> tuple[Array, ...]:
        """Per buffer dimension, the element coordinate of every iteration of the box (flattened,
        row-major over the box): the general path's representation."""
        shape = tuple(hi - lo for lo, hi in self.box)
        out = []
        for o, k in zip(self.offsets, self.axes):
            if k is None:
                c = np.full(shape, o, np.int64)
            else:
                lo, hi = self.box[k]
                line = np.arange(o + lo, o + hi, dtype=np.int64)
                c = np.broadcast_to(line.reshape([-1 if a == k else 1 for a in range(len(shape))]), shape)
            out.append(c.reshape(-1))
        return tuple(out)


def active_box(active: Array, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """The iterations kept by `active` as a box, if they fill one (None when they do not, or
    when none is kept)."""
    if not shape:
        return None
    a = np.asarray(active)
    if a.ndim == 0 or a.all():
        return tuple((0, n) for n in shape) if a.all() else None
    a = np.broadcast_to(a, shape)
    box = []
    count = 1
    for axis in range(len(shape)):
        others = tuple(x for x in range(len(shape)) if x != axis)
        hit = np.flatnonzero(a.any(axis=others)) if others else np.flatnonzero(a)
        if hit.size == 0:
            return None
        lo, hi = int(hit[0]), int(hit[-1]) + 1
        box.append((lo, hi))
        count *= hi - lo
    return tuple(box) if int(np.count_nonzero(a)) == count else None


def rect_map(indices: list[Array], box: tuple[tuple[int, int], ...], buffer_shape: tuple[int, ...]) -> RectMap | None:
    """The map of an access whose per-dimension index arrays (broadcastable to the space) are
    constants or one axis with step +1 (each axis in one dimension at most), if the elements it
    touches over `box` lie inside the buffer; else None (the general path checks and reports)."""
    axes: list[int | None] = []
    offsets: list[int] = []
    for i in indices:
        i = np.asarray(i)
        if i.ndim not in (0, len(box)):
            return None
        moving = [k for k, n in enumerate(i.shape) if n > 1]
        if not moving:
            axes.append(None)
            offsets.append(int(i.reshape(-1)[0]) if i.size else 0)
            continue
        if len(moving) > 1:
            return None
        k = moving[0]
        line = i.reshape(-1)
        if line[-1] - line[0] != line.size - 1 or np.any(np.diff(line) != 1):
            return None
        if k in axes:
            return None
        axes.append(k)
        offsets.append(int(line[0]))
    m = RectMap(tuple(axes), tuple(offsets), box)
    for start, size, extent in zip(m.starts, m.sizes, buffer_shape):
        if start < 0 or start + size > extent:
            return None
    return m
