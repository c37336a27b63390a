"""A JAX job that dies of out of memory inside XLA's preallocated pool (75 % of the GPU by
default): arrays of 8 GiB kept in a list until the pool has no room. Prints XLA's own figures
just before the fatal request."""
import json
import jax
import jax.numpy as jnp
keep = []
d = jax.local_devices()[0]
for i in range(100):
    st = d.memory_stats()
    print("xla-figures", json.dumps({"bytes_in_use": st["bytes_in_use"], "bytes_limit": st["bytes_limit"],
                                     "peak_bytes_in_use": st["peak_bytes_in_use"]}), flush=True)
    keep.append(jnp.ones((8 << 30) // 4, dtype=jnp.float32))
    keep[-1].block_until_ready()
