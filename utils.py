"""Helpers shared by eval.py and reference.py: seeding, L2 flushes, the output check."""
import random

import numpy as np
import torch


def set_seed(seed: int = 42) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds the CUDA generators too


# A few hundred MB is far more than any L2 (H200: 50 MB, B200: 126 MB).
_L2_FLUSH_BYTES = 512 * 1024 * 1024
# The board's flush (below) keeps the GPU busy for about 10 ms, so the host has queued all 15 timed
# calls before the GPU reaches them and host-side launch cost is hidden. Spinning the GPU that long
# after the small flush reproduces this; ~20 M cycles is ~10 ms at the 1.5-2 GHz of H200/B200.
_BOARD_LIKE_BUSY_CYCLES = 20_000_000


def clear_l2_cache() -> None:
    """Local flush: evict L2, then keep the GPU busy as long as the board's flush does."""
    torch.empty(_L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda").fill_(42)
    torch.cuda._sleep(_BOARD_LIKE_BUSY_CYCLES)


def clear_l2_cache_large() -> None:
    """The board's flush: a 62.5 GiB float32 randn (used when eval.py runs under POPCORN_FD)."""
    dummy = torch.randn((16000, 1024, 1024), device="cuda")
    del dummy


@torch.no_grad()
def verbose_allclose(
    received: torch.Tensor, expected: torch.Tensor, rtol=1e-05, atol=1e-08, max_print=5
) -> list[str]:
    """Describe where `received` is not within atol + rtol * |expected| of `expected`.

    Returns [] when all elements match. NaN and +-Inf must appear in the same places. The
    arithmetic runs in the tensors' own dtype (fp16 here), exactly as the board's check does,
    so values on the edge of the tolerance are judged the same way.
    """
    if received.shape != expected.shape:
        return [f"shape mismatch: got {tuple(received.shape)}, expected {tuple(expected.shape)}"]
    outside_tolerance = torch.abs(received - expected) > atol + rtol * torch.abs(expected)
    mismatched = (
        outside_tolerance
        | (torch.isnan(received) ^ torch.isnan(expected))
        | (torch.isposinf(received) ^ torch.isposinf(expected))
        | (torch.isneginf(received) ^ torch.isneginf(expected))
    )
    count = int(mismatched.count_nonzero())
    if count == 0:
        return []
    details = [f"{count} of {mismatched.numel()} elements mismatch"]
    for index in torch.nonzero(mismatched)[:max_print].tolist():
        index = tuple(index)
        details.append(
            f"at {index}: got {received[index].item()}, expected {expected[index].item()}"
        )
    if count > max_print:
        details.append(f"... and {count - max_print} more")
    return details


def match_reference(data, output, reference: callable, rtol=1e-05, atol=1e-08) -> tuple[bool, str]:
    """Compare a kernel's output list with the reference's; returns (ok, one-line message)."""
    expected = reference(data)
    if len(output) != len(expected):
        return False, f"output length mismatch: got {len(output)}, expected {len(expected)}"
    for group, (output_i, expected_i) in enumerate(zip(output, expected)):
        reasons = verbose_allclose(output_i, expected_i, rtol=rtol, atol=atol)
        if reasons:
            # One line: the board's protocol is one `key: value` line per message.
            return False, (
                "mismatch found! custom implementation doesn't match reference: "
                f"group {group}: " + "; ".join(reasons)
            )
    return True, ""


def make_match_reference(reference: callable, **kwargs):
    def wrapped(data, output):
        return match_reference(data, output, reference=reference, **kwargs)

    return wrapped
