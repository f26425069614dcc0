"""R: GPU/NPU health, RDMA, DCGM diagnostics."""
