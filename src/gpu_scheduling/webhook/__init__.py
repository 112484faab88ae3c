"""The CUDA_VISIBLE_DEVICES mutating admission webhook (HTTPS)."""
