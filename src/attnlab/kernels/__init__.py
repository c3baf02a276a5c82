"""attnlab.kernels: custom autograd kernels (memory-bounded or sparse forms of the reference scores)."""
