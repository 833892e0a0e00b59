"""Framework adapters: Keras 3, PyTorch, JAX, TensorFlow; each imported lazily."""
