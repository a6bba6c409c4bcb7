"""reference.py against independent computations written here; runs on the CPU, and with CUDA on
the board's GPU inputs (eval.py's GPU-only runs: test_cuda.py)."""
import math

import numpy as np
import pytest
import torch

import reference

# e2m1 code -> value, written out independently of reference.py: bit 3 sign, bits 0-2 magnitude.
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def dequantize_np(fp4: torch.Tensor, scales: torch.Tensor) -> np.ndarray:
    """[rows, K/2] FP4 pairs, [rows, K/16] e4m3 scales -> float64 [rows, K]."""
    packed = fp4.view(torch.uint8).cpu().numpy()
    values = np.empty((packed.shape[0], packed.shape[1] * 2))
    values[:, 0::2] = E2M1[packed & 0xF]  # low nibble: even K index
    values[:, 1::2] = E2M1[packed >> 4]
    return values * np.repeat(scales.float().cpu().numpy().astype(np.float64), 16, axis=1)


def gemm_np(data) -> list[np.ndarray]:
    """Gold standard: float64 sums (exact for these data), rounded once to fp16."""
    results = []
    for (a, b, _), (sfa, sfb) in zip(data[0], data[1]):
        product = dequantize_np(a[:, :, 0], sfa[:, :, 0]) @ dequantize_np(b[:, :, 0], sfb[:, :, 0]).T
        results.append(product.astype(np.float16))
    return results


def to_blocked_np(scales: np.ndarray) -> np.ndarray:
    """The board's to_blocked: zero-pad to 128-row x 4-column blocks; each block becomes 32 rows of
    16 bytes, byte (r % 32) * 16 + (r // 32) * 4 + c of block (row block, column block)."""
    rows, cols = scales.shape
    row_blocks, col_blocks = math.ceil(rows / 128), math.ceil(cols / 4)
    padded = np.zeros((row_blocks * 128, col_blocks * 4), dtype=scales.dtype)
    padded[:rows, :cols] = scales
    blocks = padded.reshape(row_blocks, 128, col_blocks, 4).transpose(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1)


DATA_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

SIZES = [  # (m, n, k): M not a multiple of 128, several groups, K a multiple of 256
    ((40, 72, 200), (128, 256, 128), (256, 512, 256)),
    ((128, 1, 300), (384, 128, 256), (768, 256, 512)),
]


@pytest.mark.parametrize("m, n, k", SIZES)
def test_reference_equals_float64_gold_standard(m, n, k):
    # On the device the data are on: the CPU, or with CUDA the board's inputs on the GPU.
    data = reference.generate_input(m=m, n=n, k=k, g=len(m), seed=1234)
    expected = gemm_np(data)
    output = reference.ref_kernel(data)
    assert len(output) == len(m)
    for got, want in zip(output, expected):
        assert got.dtype == torch.float16
        assert np.array_equal(got[:, :, 0].cpu().numpy(), want)  # bitwise: both exact, rounded once
        assert np.abs(want).max() > 8  # the data are not degenerate


def _hand_made_input(a_codes: np.ndarray, b_codes: np.ndarray, sfa: np.ndarray, sfb: np.ndarray):
    """Inputs with the task's structure from packed FP4 bytes and float scales (exact in e4m3)."""
    def fp4(codes):
        return torch.from_numpy(codes.astype(np.uint8))[None].permute(1, 2, 0).view(torch.float4_e2m1fn_x2)

    def e4m3(values):
        tensor = torch.from_numpy(values.astype(np.float32)).to(torch.float8_e4m3fn)
        assert torch.equal(tensor.float(), torch.from_numpy(values.astype(np.float32)))
        return tensor[:, :, None]

    (m, half_k), n = a_codes.shape, b_codes.shape[0]
    c = torch.full((m, n, 1), float("nan"), dtype=torch.float16)
    return [(fp4(a_codes), fp4(b_codes), c)], [(e4m3(sfa), e4m3(sfb))], [None], [(m, n, half_k * 2, 1)]


def test_dequantize_puts_the_low_nibble_at_the_even_k_index():
    # A GEMM cannot tell (both operands' pairs swap together), so check the dequantization itself.
    codes = np.zeros((2, 16), np.uint8)
    codes[0, 0], codes[1, 15] = 0x62, 0xF9  # row 0: k=0 -> 1, k=1 -> 4; row 1: k=30 -> -0.5, k=31 -> -6
    fp4 = torch.from_numpy(codes).view(torch.float4_e2m1fn_x2)
    scales = torch.tensor([[1.0, 2.0], [1.0, 0.5]]).to(torch.float8_e4m3fn)
    values = reference._dequantize(fp4, scales, torch.float64)
    assert values[0, :2].tolist() == [1.0, 4.0] and values[1, 30:].tolist() == [-0.25, -3.0]
    assert values.count_nonzero() == 4
    assert np.array_equal(values.numpy(), dequantize_np(fp4, scales))


def test_reference_signs_and_scales_by_hand():
    a = np.zeros((3, 128), np.uint8)
    a[0, 0] = 0x62  # a[0, 0] = 1 (code 2), a[0, 1] = 4 (code 6)
    a[1, 8] = 0xF0  # a[1, 16] = 0, a[1, 17] = -6 (code 15): second scale block
    b = np.zeros((2, 128), np.uint8)
    b[0, 0], b[0, 8] = 0x02, 0x03  # b[0, 0] = 1, b[0, 16] = 1.5
    b[1, 0], b[1, 8] = 0x20, 0x90  # b[1, 1] = 1, b[1, 17] = -0.5 (code 9)
    sfa = np.ones((3, 16))
    sfa[0, 0], sfa[1, 1] = 2, 0.25
    sfb = np.ones((2, 16))
    sfb[1, 1] = 3
    data = _hand_made_input(a, b, sfa, sfb)
    (c,) = reference.ref_kernel(data)
    assert c is data[0][0][2]  # written in place, as the board's reference does
    expected = [[2.0, 8.0],  # row 0: (1*2) * 1, (4*2) * 1
                [0.0, 2.25],  # row 1: (-6*0.25) * (-0.5*3)
                [0.0, 0.0]]
    assert c[:, :, 0].tolist() == expected


def test_reference_full_e2m1_range_and_varied_scales():
    rng = np.random.default_rng(5)
    m, n, k = 72, 128, 512
    a = rng.integers(0, 256, (m, k // 2))  # every code, including 4 and 6
    b = rng.integers(0, 256, (n, k // 2))
    scale_values = np.array([0.125, 0.25, 0.5, 1, 1.5, 2, 3, 4])
    sfa = rng.choice(scale_values, (m, k // 16))
    sfb = rng.choice(scale_values, (n, k // 16))
    data = _hand_made_input(a, b, sfa, sfb)
    (got,) = reference.ref_kernel(data)
    want = torch.from_numpy(gemm_np((data[0], data[1]))[0])
    got = got[:, :, 0]
    assert not got.isnan().any()
    assert torch.all((got.double() - want.double()).abs() <= 1e-3 + 1e-3 * want.double().abs())
    assert (got == want).float().mean() > 0.99


def test_reordered_scales_are_the_blocked_layout_with_random_padding():
    m, k = 200, 512  # 200 rows: one full 128-row block and a block with 56 padding rows
    data = reference.generate_input(m=(m,), n=(256,), k=(k,), g=1, seed=99)
    sfa = data[1][0][0][:, :, 0].float().numpy()
    sfa_reordered = data[2][0][0]
    # The reordered tensor is a permuted view of a contiguous (1, rest_m, rest_k, 32, 4, 4) buffer.
    buffer = sfa_reordered.permute(5, 2, 4, 0, 1, 3)
    assert buffer.is_contiguous()
    got = buffer.reshape(-1).float().cpu().numpy()
    blocked = to_blocked_np(sfa)
    real = blocked != 0  # the board's to_blocked pads with zeros; real scales are 1 or 2
    assert np.array_equal(got[real], blocked[real])
    padding = got[~real]
    assert padding.size == (256 - m) * (k // 16)
    assert set(np.unique(padding)) == {1.0, 2.0}  # random 1s and 2s, never zero


def test_reordered_scale_element_formula():
    m, k = 136, 256
    data = reference.generate_input(m=(m,), n=(128,), k=(k,), g=1, seed=3)
    sfa, sfa_reordered = data[1][0][0].float(), data[2][0][0].float()
    for r in range(m):
        for j in range(k // 16):
            assert sfa_reordered[r % 32, (r % 128) // 32, r // 128, j % 4, j // 4, 0] == sfa[r, j, 0]


def test_to_blocked_matches_the_boards_layout():
    rng = np.random.default_rng(0)
    for rows, cols in [(40, 16), (128, 32), (200, 48), (256, 6)]:
        scales = rng.choice([0.5, 1.0, 2.0, 3.0], (rows, cols))
        got = reference.to_blocked(torch.from_numpy(scales).to(torch.float8_e4m3fn)).float().numpy()
        assert np.array_equal(got, to_blocked_np(scales))


def test_generate_input_shapes_dtypes_strides_and_devices():
    m, n, k = (40, 256), (128, 384), (256, 768)
    abc, sf, sf_reordered, sizes = reference.generate_input(m=m, n=n, k=k, g=2, seed=1111)
    assert sizes == [(40, 128, 256, 1), (256, 384, 768, 1)]
    for (a, b, c), (sfa, sfb), (sfa_r, sfb_r), (mi, ni, ki, _) in zip(abc, sf, sf_reordered, sizes):
        for x, rows in ((a, mi), (b, ni)):
            assert x.dtype == torch.float4_e2m1fn_x2
            assert x.shape == (rows, ki // 2, 1) and x.stride() == (ki // 2, 1, rows * ki // 2)
            assert x.device.type == DATA_DEVICE
            # Only the sign bit and the two low bits of each nibble are drawn.
            assert not (x.view(torch.uint8) & 0b0100_0100).any()
        assert c.dtype == torch.float16 and c.device.type == DATA_DEVICE
        assert c.shape == (mi, ni, 1) and c.stride() == (ni, 1, mi * ni)
        for s, s_r, rows in ((sfa, sfa_r, mi), (sfb, sfb_r, ni)):
            sf_k = ki // 16
            assert s.dtype == torch.float8_e4m3fn and s.device.type == "cpu"
            assert s.shape == (rows, sf_k, 1) and s.stride() == (sf_k, 1, rows * sf_k)
            assert set(s.float().unique().tolist()) == {1.0, 2.0}
            rest_m, rest_k = math.ceil(rows / 128), math.ceil(sf_k / 4)
            assert s_r.dtype == torch.float8_e4m3fn and s_r.device.type == DATA_DEVICE
            assert s_r.shape == (32, 4, rest_m, 4, rest_k, 1)
            assert s_r.stride() == (16, 4, rest_k * 512, 1, 512, rest_m * rest_k * 512)


def test_generate_input_is_deterministic_per_seed():
    def draw(seed):
        abc, sf, sf_reordered, _ = reference.generate_input(m=(72,), n=(128,), k=(256,), g=1, seed=seed)
        # Compare bits: equality is not defined for every 8- and 4-bit float type.
        return [t.view(torch.uint8) if t.element_size() == 1 else t
                for t in (*abc[0], *sf[0], *sf_reordered[0])]

    first, again, other = draw(5), draw(5), draw(6)
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    assert not torch.equal(first[0], other[0])


def board_draws(m, n, k, seed, device):
    """The board's generate_input, draw by draw, written here independently of reference.py: per
    group a, b, c (on `device`: CUDA on the board), sfa, sfb (CPU generator), then the
    blocked-layout fill of sfa and of sfb (on `device`), into which the real scales are scattered."""
    torch.manual_seed(seed)
    groups = []
    for mi, ni, ki in zip(m, n, k):
        a = torch.randint(255, (1, mi, ki // 2), dtype=torch.uint8, device=device) & 0xBB
        b = torch.randint(255, (1, ni, ki // 2), dtype=torch.uint8, device=device) & 0xBB
        c = torch.randn((1, mi, ni), dtype=torch.float16, device=device)
        sfa = torch.randint(1, 3, (1, mi, ki // 16), dtype=torch.int8)
        sfb = torch.randint(1, 3, (1, ni, ki // 16), dtype=torch.int8)
        blocked = []
        for rows, scales in ((mi, sfa), (ni, sfb)):
            shape = (1, math.ceil(rows / 128), math.ceil(ki / 64), 32, 4, 4)
            fill = torch.randint(1, 3, shape, dtype=torch.int8, device=device)
            r = torch.arange(rows).repeat_interleave(ki // 16)
            j = torch.arange(ki // 16).repeat(rows)
            fill[0, r // 128, j // 4, r % 32, (r % 128) // 32, j % 4] = scales[0, r, j].to(device)
            blocked.append(fill)
        groups.append((a, b, c.view(torch.int16), sfa, sfb, *blocked))
    return groups


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """[rows, cols, 1] or blocked-layout view -> the underlying (1, ...) buffer as integers."""
    order = (2, 0, 1) if tensor.dim() == 3 else (5, 2, 4, 0, 1, 3)
    tensor = tensor.permute(*order)
    if tensor.dtype == torch.float8_e4m3fn:
        return tensor.view(torch.int8)  # the board's int8 1/2 became e4m3; compare as int8 below
    return tensor.view(torch.int16 if tensor.element_size() == 2 else torch.uint8)


@pytest.mark.parametrize("m, n, k", SIZES)
def test_generate_input_is_bitwise_the_boards(m, n, k):
    # With CUDA this is the board's exact input; without, reference.py makes the board's CUDA draws
    # on the CPU, so the same sequence from one generator must come out.
    data = reference.generate_input(m=m, n=n, k=k, g=len(m), seed=1111)
    expected = board_draws(m, n, k, seed=1111, device=DATA_DEVICE)
    for group, want in enumerate(expected):
        (a, b, c), (sfa, sfb), (sfa_r, sfb_r) = data[0][group], data[1][group], data[2][group]
        for got, want_i in zip((a, b, c, sfa, sfb, sfa_r, sfb_r), want):
            if want_i.dtype == torch.int8:  # scales: compare e4m3 bits
                want_i = want_i.to(torch.float8_e4m3fn).view(torch.int8)
            assert got.device.type == want_i.device.type
            assert torch.equal(bits(got), want_i)


# --- check_implementation ------------------------------------------------------------------


@pytest.fixture
def checked():
    """(inputs, the reference's correct output for them)."""
    def make():
        return reference.generate_input(m=(40, 128), n=(128, 256), k=(256, 256), g=2, seed=21)

    return make(), reference.ref_kernel(make())


def test_check_accepts_the_reference(checked):
    assert reference.check_implementation(*checked) == (True, "")


def test_check_reports_a_single_wrong_element(checked):
    data, output = checked
    expected = output[1][5, 7, 0].item()
    output[1][5, 7, 0] += 0.5
    got = output[1][5, 7, 0].item()
    ok, message = reference.check_implementation(data, output)
    assert not ok
    assert "group 1" in message and "1 of 32768 elements mismatch" in message
    assert f"at (5, 7, 0): got {got}, expected {expected}" in message
    assert "\n" not in message  # one line: the board's protocol is line based


def test_check_reports_nan_and_inf(checked):
    data, output = checked
    output[0][0, 0, 0] = float("nan")
    ok, message = reference.check_implementation(data, output)
    assert not ok and "got nan" in message
    output[0][0, 0, 0] = float("inf")
    ok, message = reference.check_implementation(data, output)
    assert not ok and "got inf" in message


def test_check_rejects_wrong_list_length_and_shape(checked):
    data, output = checked
    ok, message = reference.check_implementation(data, output[:1])
    assert not ok and "length" in message
    ok, message = reference.check_implementation(data, [])
    assert not ok
    ok, message = reference.check_implementation(data, [output[0][:-1], output[1]])
    assert not ok and "shape" in message


def test_check_tolerance_is_the_boards(checked):
    # |got - expected| <= 1e-3 + 1e-3 * |expected|, evaluated in fp16 like the board.
    data, output = checked
    reference_c = reference.ref_kernel(data)[0]
    zero = (reference_c == 0).nonzero()[0].tolist()
    output[0][tuple(zero)] = 2.0 ** -10  # 0.00098 is within 0.001 of 0
    assert reference.check_implementation(data, output)[0]
    output[0][tuple(zero)] = 2.0 ** -9  # 0.00195 is not
    assert not reference.check_implementation(data, output)[0]
