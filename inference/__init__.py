"""SoA collections into PyTorch models (zero-copy), and Triton inference as a service."""
