"""The GPU check's measurements (scripts/gpu_check.py; docs/validation.md, 'On a GPU').

- ``plan``: what is measured (models, dtypes, batch sizes; the dry run's tiny stand-ins), torch-free;
- ``compute``: per-model, per-unit (CUDA events) and per-layer (torch.profiler kernels) times;
- ``memory``: a training step's peak allocation, static bytes and saved activations, with and
  without activation checkpointing;
- ``interference``: a GEMM loop (and a memory-bound loop) alone and beside kernels that hold SMs
  as NCCL's channels do, and beside device-to-device copies.
Each measures on a CUDA device or, in a dry run, on the CPU with the same code (real.devtime).
What the simulator predicts for the same cases, and the report, are validation/gpu_report.py's.
"""
