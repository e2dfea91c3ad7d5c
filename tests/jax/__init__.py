"""The JAX integration: calling conventions of kernels inside jit and shard_map, errors, the JAX shim."""
