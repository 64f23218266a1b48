"""PyTorch frontend (in progress)."""
