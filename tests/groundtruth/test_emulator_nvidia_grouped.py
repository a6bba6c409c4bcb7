"""The emulator on NVIDIA's grouped block-scaled GEMM (CUTLASS v4.5.0's `grouped_blockscaled_gemm.py`, from
flashinfer-python 0.6.17's wheel; groundtruth/nvidia_grouped.py), run through `tools/emulate.py nvidia-grouped`
against the exact reference. The kernel patches its TMA descriptors on the device (emulator/isa/tensormap.py):
a PASS means every group's A, B, SFA, SFB and C were read and written through maps the kernel rewrote.

The example compiles with nvidia-cutlass-dsl 4.5.2 only: under 4.3.5 every test skips with one line. Under
4.5.2 without flashinfer-python 0.6.17 they skip, and fail under CI=true.

- Quick: 2 groups of different M, N, K, 1-CTA, eager.
- Long: 3 groups (one with 6 k-blocks, workers wrapping over tiles and groups), 1-CTA and 2-CTA, eager and
  adversarial, with race detection (zero races).
- Long, planted defect: the A map's patched global address off by 16 bytes (bit 4 flipped before the first
  `tensormap.replace.global_address`): the run must not PASS (FAIL on wrong data or ERROR reading past A).
"""

import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import missing

ROOT = Path(__file__).resolve().parents[2]
FLASHINFER = "0.6.17"  # its wheel carries CUTLASS v4.5.0's examples
CASE_SECONDS = 180  # wall seconds on the shared 2-core machine (a compile is most of it)

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the DSL needs Python 3.10+")

QUICK_CASE = ["--groups", "2", "--mnk", "256,128,256", "--mnk", "128,256,512"]
WRAP_CASE = ["--groups", "3", "--mnk", "256,128,256", "--mnk", "128,256,512", "--mnk", "384,128,768"]
FORMS = {
    "1cta": ["--mma-tiler", "128,128", "--cluster", "1,1", "--clusters", "2"],
    "2cta": ["--mma-tiler", "256,128", "--cluster", "2,1", "--clusters", "1"],
}
# bit 4 of A's address flipped just before the kernel writes it into A's map
ADDRESS_DEFECT = (r'sed -E "0,/tensormap\.replace\.tile\.global_address/s/^(\s*)(tensormap\.replace\.tile\.'
                  r'global_address\S* \[[^]]+\], (%rd[0-9]+);)/\1xor.b64 \3, \3, 16;\n\1\2/"')


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def require() -> None:
    """Skip unless nvidia-cutlass-dsl 4.5.x and flashinfer-python 0.6.17 are installed (fail under CI when
    the DSL is 4.5.x and FlashInfer is missing)."""
    dsl = version("nvidia-cutlass-dsl") or "none"
    if not dsl.startswith("4.5."):
        pytest.skip(f"NVIDIA's grouped example compiles with nvidia-cutlass-dsl 4.5.2; {dsl} is installed")
    installed = version("flashinfer-python")
    if installed != FLASHINFER:
        missing(f"flashinfer-python {FLASHINFER} (its wheel carries the example) is not installed "
                f"({installed or 'none'}; requirements-test.txt)")


def emulate(*args: str, timeout: int = 600):
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "nvidia-grouped", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    return done.returncode, lines[-1], done.stdout, time.perf_counter() - start


@pytest.mark.long  # a compile of ~40 s: the quick set keeps the field-layout test only
def test_nvidia_grouped_quick_case_matches_the_exact_reference():
    require()
    rc, verdict, out, seconds = emulate(*QUICK_CASE)
    assert rc == 0 and verdict.startswith("PASS"), out[-3000:]
    assert seconds < CASE_SECONDS, f"{seconds:.0f} s"


@pytest.mark.long
@pytest.mark.parametrize("mode", ["eager", "adversarial"])
@pytest.mark.parametrize("form", list(FORMS))
def test_nvidia_grouped_matches_the_exact_reference_with_no_race(form, mode):
    require()
    rc, verdict, out, seconds = emulate(*WRAP_CASE, *FORMS[form], "--mode", mode, "--seed", "3", "--races")
    assert rc == 0 and verdict.startswith("PASS") and verdict.endswith("races=0"), out[-3000:]
    assert seconds < CASE_SECONDS * 2, f"{form} {mode}: {seconds:.0f} s"


@pytest.mark.long
def test_patched_global_address_off_by_16_bytes_is_caught():
    require()
    rc, verdict, out, _ = emulate(*QUICK_CASE, "--ptx-filter", ADDRESS_DEFECT)
    assert rc in (1, 4) and verdict.split()[0] in ("FAIL", "ERROR"), out[-3000:]


def test_replaced_fields_decode_as_written_and_leave_the_rest():
    """tensormap.replace's field positions against tma.py's decoder: each value written decodes back, every
    other bit of the map is kept, and a misaligned address or stride is refused."""
    import struct

    from emulator import tma
    from emulator.errors import EmulatorError
    from emulator.isa.tensormap import _patch

    rank5 = 4 << 4  # word 1: rank - 1 = 4
    words = [0xF] + [rank5 | 0xDEAD << 32] + [0] * 14
    words[7] = 0x0F0F_0F0F  # boxes of dims 1..4
    before = tma.decode_tensor_map(struct.pack("<16Q", *words))
    _patch(words, "global_address", 0, 0x1_2345_6780)
    for ordinal, size in enumerate((7168, 300, 5, 1, 2 ** 32)):
        _patch(words, "global_dim", ordinal, size)
    for ordinal, stride in enumerate((3584, 0x3_0000_0010, 16, 2 ** 40 - 16)):
        _patch(words, "global_stride", ordinal, stride)
    after = tma.decode_tensor_map(struct.pack("<16Q", *words))
    assert after.global_address == 0x1_2345_6780
    assert after.dims == (7168, 300, 5, 1, 2 ** 32)
    assert after.strides == (3584, 0x3_0000_0010, 16, 2 ** 40 - 16)
    assert (after.rank, after.box, after.unknown_bits) == (before.rank, before.box, before.unknown_bits)
    assert words[0] & 0xF == 0xF  # bits 0-3 are not the address's
    for field, value in (("global_address", 0x1008), ("global_stride", 24)):
        with pytest.raises(EmulatorError):
            _patch(words, field, 0, value)
