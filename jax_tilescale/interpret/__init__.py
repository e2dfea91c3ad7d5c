"""CPU interpreter of kernel IR: simulates every device of the mesh and NVSHMEM's memory model.

`InterpreterSession(kernel, InterpretOptions()).run(pe, team, inputs)` runs one device's part
of a launch; the devices of a team call it concurrently from their own threads.
"""

from .options import InterpretOptions
from .session import InterpreterSession

__all__ = ["InterpretOptions", "InterpreterSession"]
