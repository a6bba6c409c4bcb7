"""Inputs, reference kernel and output check of the NVFP4 block-scaled grouped GEMM.

generate_input makes the same random draws, in the same order and on the same devices, as the
board's reference.py, so on a CUDA machine it returns bitwise the same tensors. Without CUDA
everything is drawn on the CPU (same shapes, dtypes, strides; other values).

ref_kernel uses torch._scaled_mm on Blackwell (compute capability 10.x) as the board does; cuBLAS
has no FP4 GEMM elsewhere, so on Hopper and on the CPU it dequantizes exactly and multiplies.
"""
import torch

from task import input_t, output_t
from utils import make_match_reference

sf_vec_size = 16  # one e4m3 scale per 16 FP4 values along K

# e2m1 code -> value; bit 3 is the sign.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_TABLE = torch.tensor(_E2M1_VALUES + tuple(-v for v in _E2M1_VALUES), dtype=torch.float64)


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def _data_device() -> torch.device:
    # The board draws FP4 data, c and the scale-layout padding with the CUDA generator.
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _blocked_buffer_as_rows(buffer: torch.Tensor) -> torch.Tensor:
    """View a (l, mn/128, sf_k/4, 32, 4, 4) blocked buffer as (mn/128, 4, 32, sf_k/4, 4, l).

    Row r of the matrix is (r // 128, (r % 128) // 32, r % 32), scale column j is (j // 4, j % 4):
    the cuBLAS 128x4 block-scaling layout, where each 128x4 tile is 512 contiguous bytes.
    """
    return buffer.permute(1, 4, 3, 2, 5, 0)


def to_blocked(scales: torch.Tensor) -> torch.Tensor:
    """(rows, cols) scales -> flat cuBLAS blocked layout, zero padded (what _scaled_mm takes)."""
    rows, cols = scales.shape
    row_blocks, col_blocks = ceil_div(rows, 128), ceil_div(cols, 4)
    padded = scales.new_zeros(row_blocks * 128, col_blocks * 4)
    padded[:rows, :cols] = scales
    return padded.view(row_blocks, 4, 32, col_blocks, 4).permute(0, 3, 2, 1, 4).reshape(-1)


def create_reordered_scale_factor_tensor(l: int, mn: int, k: int, scales: torch.Tensor) -> torch.Tensor:
    """Scales [mn, k/16, l] -> blocked layout as a (32, 4, mn/128, 4, k/64, l) view.

    The padding rows and columns hold random 1s and 2s, as on the board (a kernel must not
    depend on them being zero).
    """
    sf_k = ceil_div(k, sf_vec_size)
    row_blocks, col_blocks = ceil_div(mn, 128), ceil_div(sf_k, 4)
    device = _data_device()
    buffer = torch.randint(
        1, 3, (l, row_blocks, col_blocks, 32, 4, 4), dtype=torch.int8, device=device
    ).to(dtype=torch.float8_e4m3fn)
    as_rows = _blocked_buffer_as_rows(buffer)
    # Round trip through a (rows, cols, l) copy: the padding keeps its random fill.
    padded = as_rows.reshape(row_blocks * 128, col_blocks * 4, l)
    padded[:mn, :sf_k] = scales.to(device)
    as_rows.copy_(padded.view(row_blocks, 4, 32, col_blocks, 4, l))
    return buffer.permute(3, 4, 1, 5, 2, 0)


def _create_fp4_tensor(l: int, mn: int, k: int) -> torch.Tensor:
    """[mn, k/2, l] FP4 pairs, K-major, as a permuted view of an (l, mn, k/2) buffer."""
    codes = torch.randint(255, size=(l, mn, k // 2), dtype=torch.uint8, device=_data_device())
    # Keep each nibble's sign bit and two low bits: values in {0, +-0.5, +-1, +-1.5}.
    codes = codes & 0b1011_1011
    return codes.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def _create_scales(l: int, mn: int, k: int) -> torch.Tensor:
    """[mn, k/16, l] e4m3 scales of 1 or 2, drawn with the CPU generator as on the board."""
    shape = (l, mn, ceil_div(k, sf_vec_size))
    return torch.randint(1, 3, shape, dtype=torch.int8).to(dtype=torch.float8_e4m3fn).permute(1, 2, 0)


def generate_input(m: tuple, n: tuple, k: tuple, g: int, seed: int) -> input_t:
    """Inputs of one test: g groups, group i of size m[i] x n[i] x k[i] (see task.input_t)."""
    torch.manual_seed(seed)
    l = 1
    abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes = [], [], [], []
    # The order of the draws below is the board's; changing it changes every value.
    for group in range(g):
        mi, ni, ki = m[group], n[group], k[group]
        a = _create_fp4_tensor(l, mi, ki)
        b = _create_fp4_tensor(l, ni, ki)
        c = torch.randn((l, mi, ni), dtype=torch.float16, device=_data_device()).permute(1, 2, 0)
        sfa = _create_scales(l, mi, ki)
        sfb = _create_scales(l, ni, ki)
        sfa_reordered = create_reordered_scale_factor_tensor(l, mi, ki, sfa)
        sfb_reordered = create_reordered_scale_factor_tensor(l, ni, ki, sfb)
        abc_tensors.append((a, b, c))
        sfasfb_tensors.append((sfa, sfb))
        sfasfb_reordered_tensors.append((sfa_reordered, sfb_reordered))
        problem_sizes.append((mi, ni, ki, l))
    return abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes


def _has_fp4_scaled_mm(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 10


def _dequantize(fp4: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[rows, K/2] FP4 pairs and [rows, K/16] scales -> [rows, K] values, exactly."""
    codes = fp4.view(torch.uint8)
    table = _E2M1_TABLE.to(codes.device, dtype)
    # The low nibble holds the element with the even K index.
    values = torch.stack((table[(codes & 0xF).long()], table[(codes >> 4).long()]), dim=-1)
    values = values.flatten(-2)
    scales = scales.to(codes.device).to(dtype).repeat_interleave(sf_vec_size, dim=-1)
    return values * scales


def _gemm(a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """One (M, K/2) x (N, K/2) block-scaled FP4 GEMM -> (M, N) fp16."""
    device = a.device
    if _has_fp4_scaled_mm(device):
        return torch._scaled_mm(
            a.view(torch.float4_e2m1fn_x2),
            b.transpose(0, 1).view(torch.float4_e2m1fn_x2),
            to_blocked(sfa).to(device),
            to_blocked(sfb).to(device),
            bias=None,
            out_dtype=torch.float16,
        )
    # Every product is exact in fp16, and with the generator's data (|value * scale| <= 3) every
    # partial sum is a multiple of 1/4 below 2^16, so float32 accumulation is exact: the result is
    # the correctly rounded fp16 of the true sum, in any summation order. float64 on the CPU keeps
    # that for any inputs; on the GPU float64 matmul would be far too slow for benchmark sizes.
    dtype = torch.float32 if device.type == "cuda" else torch.float64
    product = _dequantize(a, sfa, dtype) @ _dequantize(b, sfb, dtype).T
    return product.to(torch.float16)


def ref_kernel(data: input_t) -> output_t:
    """Writes each group's a @ b.T (scaled) into its c and returns the list of c."""
    abc_tensors, sfasfb_tensors, _, problem_sizes = data
    result = []
    for (a, b, c), (sfa, sfb), (_, _, _, l) in zip(abc_tensors, sfasfb_tensors, problem_sizes):
        for batch in range(l):
            c[:, :, batch] = _gemm(a[:, :, batch], b[:, :, batch], sfa[:, :, batch], sfb[:, :, batch])
        result.append(c)
    return result


check_implementation = make_match_reference(ref_kernel, rtol=1e-03, atol=1e-03)
