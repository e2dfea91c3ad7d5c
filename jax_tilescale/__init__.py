"""jax_tilescale: multi-GPU tile kernels (TileScale-style, NVSHMEM) as first-class JAX ops."""
