"""Types of the nvfp4_group_gemm task (same names and meaning as the board's task.py)."""
from typing import TypedDict, TypeVar

import torch

# (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes), one entry per group:
#   abc_tensors[i]               = (a [M, K/2, 1] fp4x2, b [N, K/2, 1] fp4x2, c [M, N, 1] fp16)
#   sfasfb_tensors[i]            = (sfa [M, K/16, 1], sfb [N, K/16, 1]) float8_e4m3fn, on the CPU
#   sfasfb_reordered_tensors[i]  = the same scales in the 128x4 blocked layout, on the GPU
#   problem_sizes[i]             = (M, N, K, 1)
input_t = TypeVar(
    "input_t",
    bound=tuple[
        list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        list[tuple[torch.Tensor, torch.Tensor]],
        list[tuple[torch.Tensor, torch.Tensor]],
        list[tuple[int, int, int, int]],
    ],
)
# The list of c tensors, written in place by the kernel.
output_t = TypeVar("output_t", bound=list[torch.Tensor])


class TestSpec(TypedDict):
    """One test or benchmark: the keyword arguments of reference.generate_input.

    (The board's task.py declares `problem_sizes` and `seed`, but its spec lines and
    generate_input use these keys.)
    """

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    g: int
    seed: int
