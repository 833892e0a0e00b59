"""Framework adapters: Keras 3, PyTorch, JAX, TensorFlow; each imported lazily.

`Pipeline.keras()`, `.torch()`, `.jax()` and `.tf()` call `keras.to_keras`,
`torch.to_torch`, `jax.to_jax` and `tf.to_tf` here; `keras.from_keras_sequence`
turns a ``keras.utils.Sequence`` into a pipeline. Importing this package
imports no framework. See docs/adapters.md.
"""

__all__: list[str] = []
