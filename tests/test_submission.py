"""submission.py: contract validation, plan caching, the sm_100a compile and inspection, and (on a GPU) results.

CPU tests run everywhere. GPU tests run on whatever kernel the device gets (tcgen05 on 10.0, the
Hopper path on 9.0) and skip cleanly without CUDA.
"""

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import reference  # noqa: E402
import submission  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
import inspect_sm100  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def make_inputs(m, n, k, seed=7):
    return reference.generate_input(m=m, n=n, k=k, g=len(m), seed=seed)


def replace_group(data, group, **tensors):
    """A copy of `data` whose group `group` has some of a, b, c, sfa, sfb, problem replaced."""
    abc, sf, sf_reordered, sizes = (list(x) for x in data)
    a, b, c = abc[group]
    sfa, sfb = sf_reordered[group]
    abc[group] = (tensors.get("a", a), tensors.get("b", b), tensors.get("c", c))
    sf_reordered[group] = (tensors.get("sfa", sfa), tensors.get("sfb", sfb))
    sizes[group] = tensors.get("problem", sizes[group])
    return abc, sf, sf_reordered, sizes


# ---------------------------------------------------------------- validation (CPU)


def test_validate_accepts_the_board_inputs_including_partial_tiles():
    data = make_inputs((40, 72, 300), (128, 256, 384), (256, 512, 256))
    assert submission.validate_inputs(data) == ((40, 128, 256), (72, 256, 512), (300, 384, 256))


BROKEN = {
    "b dtype": lambda d: replace_group(d, 1, b=d[0][1][1].view(torch.uint8)),
    "c transposed": lambda d: replace_group(d, 1, c=d[0][1][2].transpose(0, 1).contiguous().transpose(0, 1)),
    "L != 1": lambda d: replace_group(d, 1, problem=(72, 256, 512, 2)),
    "problem vs tensors": lambda d: replace_group(d, 1, problem=(80, 256, 512, 1)),
    "sfa layout": lambda d: replace_group(d, 1, sfa=d[2][1][0].contiguous()),
}


@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_contract_violations_name_the_group_and_problem(breakage):
    data = BROKEN[breakage](make_inputs((40, 72), (128, 256), (256, 512)))
    with pytest.raises(ValueError, match=r"group 1 \(problem \((72|80), 256, 512, [12]\)\)"):
        submission.validate_inputs(data)


def test_k_must_be_a_multiple_of_the_k_tile():
    data = make_inputs((64,), (128,), (128,))
    with pytest.raises(ValueError, match=r"group 0 \(problem \(64, 128, 128, 1\)\).*multiple of 256"):
        submission.validate_inputs(data)


def test_list_lengths_must_match():
    abc, sf, sf_reordered, sizes = make_inputs((64, 64), (128, 128), (256, 256))
    with pytest.raises(ValueError, match="list lengths differ"):
        submission.validate_inputs((abc, sf, sf_reordered, sizes[:1]))


def test_broken_input_raises_before_anything_is_written():
    data = BROKEN["b dtype"](make_inputs((40, 72), (128, 256), (256, 512)))
    before = [c.clone() for _, _, c in data[0]]
    with pytest.raises(ValueError):
        submission.custom_kernel(data)
    for (_, _, c), kept in zip(data[0], before):
        assert torch.equal(c, kept)


def test_tile_counts_match_the_design_note():
    tile = submission.SM100_CONFIG.mma_tile_mn
    counts = []
    for bench in ((80, 176, 128, 72, 64, 248, 96, 160), 4096), ((40, 76, 168, 72, 164, 148, 196, 160), 7168), (
        (192, 320),
        3072,
    ), ((128, 384), 4096):
        ms, n = bench
        counts.append(submission._tile_count([(m, n, 256) for m in ms], tile))
    assert counts == [352, 728, 120, 128]


# ---------------------------------------------------------------- sm_100a inspection (CPU)

# LEAD: today's kernel is 1-CTA and patches tensor maps in the kernel, so tools/inspect_sm100.py
# fails it on exactly these two checks (issue 9 asks for both). When the 2-CTA kernel with
# host-built descriptors lands, empty this list: the test then requires a clean pass (exit 0).
KNOWN_INSPECTION_FAILURES = [
    "tcgen05.mma is not cta_group::2 (no 2-CTA MMA)",
    "the GEMM kernel rewrites tensor maps (50 tensormap.replace)",
]


def inspection_rows(stdout: str) -> list[dict]:
    """The kernel rows of inspect_sm100.py's table, by column name."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["groups", "kernel"]).split()[:-1]
    rows = []
    for line in lines:
        cells = line.split(None, len(header))
        if len(cells) == len(header) + 1 and cells[0].isdigit() and cells[1].startswith("k"):
            rows.append(dict(zip(header + ["verdict"], cells)))
    return rows


def test_every_group_count_compiles_for_sm100a_with_the_claimed_sass(tmp_path):
    """Compile G = 1, 2, 3, 4, 5, 8, 16, 32 for sm_100a and read PTX and SASS (no GPU involved)."""
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "inspect_sm100.py"), "--keep", str(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    rows = inspection_rows(run.stdout)
    assert sorted({int(row["groups"]) for row in rows}) == list(inspect_sm100.DEFAULT_GROUPS), run.stdout + run.stderr
    gemm_rows = [row for row in rows if int(row["mma"]) > 0]
    assert {int(row["groups"]) for row in gemm_rows} == set(inspect_sm100.DEFAULT_GROUPS)
    for row in gemm_rows:
        assert int(row["threads"]) >= 192 and int(row["UTMALDG"]) > 0 and int(row["UTC*MMA"]) > 0
        assert row["LDL"] == row["STL"] == "0"
        assert int(row["smem_B"]) <= inspect_sm100.SM100_SMEM_PER_BLOCK
        expected = "ok" if not KNOWN_INSPECTION_FAILURES else "FAIL: " + "; ".join(KNOWN_INSPECTION_FAILURES)
        assert row["verdict"] == expected, run.stdout
    assert run.returncode == (1 if KNOWN_INSPECTION_FAILURES else 0), run.stdout + run.stderr
    for groups in inspect_sm100.DEFAULT_GROUPS:  # --keep: every module's cubin, PTX and SASS
        sass = (tmp_path / f"g{groups}_c0.sass").read_text()
        assert "UTMALDG" in sass and (tmp_path / f"g{groups}_c0.cubin").stat().st_size > 0
        assert "tcgen05.mma" in (tmp_path / f"g{groups}_c0.ptx").read_text(errors="replace")


def test_a_compile_of_several_variants_is_inspected_variant_by_variant(tmp_path):
    """compile_sm100 may compile several kernels per group count: each is kept and read apart."""
    wrapper = tmp_path / "two_variants.py"
    wrapper.write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('real_submission', {os.path.join(ROOT, 'submission.py')!r})\n"
        "real = importlib.util.module_from_spec(spec)\n"
        "sys.modules['real_submission'] = real\n"
        "spec.loader.exec_module(real)\n"
        "custom_kernel = real.custom_kernel\n\n"
        "def compile_sm100(num_groups):\n"
        "    return [real.compile_sm100(num_groups), real.compile_sm100(num_groups + 1)]\n")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "inspect_sm100.py"), "--submission", str(wrapper),
                          "--groups", "2", "--keep", str(tmp_path / "kept")], capture_output=True, text=True, timeout=600)
    rows = inspection_rows(run.stdout)
    assert [row["groups"] for row in rows] == ["2", "2"], run.stdout + run.stderr
    assert sorted(path.name for path in (tmp_path / "kept").iterdir()) == [
        "g2_c0.cubin", "g2_c0.ptx", "g2_c0.sass", "g2_c1.cubin", "g2_c1.ptx", "g2_c1.sass"]


# ---------------------------------------------------------------- results (GPU)


def poisoned(data):
    for _, _, c in data[0]:
        c.fill_(float("nan"))
    return data


def expected(data):
    """The reference result, written into fresh copies of c so `data` stays untouched."""
    abc = [(a, b, torch.empty_like(c)) for a, b, c in data[0]]
    return reference.ref_kernel((abc, data[1], data[2], data[3]))


SHAPES = {
    "task test 9": ((40, 56, 384, 512), (512, 384, 256, 128), (256, 256, 256, 256)),
    "one group M=1": ((1,), (256,), (256,)),
    "M=300 N=256": ((300, 72), (256, 128), (512, 256)),
    "16 groups": (tuple(range(8, 136, 8)), (128,) * 16, (256,) * 16),
}


@needs_cuda
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_matches_reference_on_poisoned_outputs(name):
    data = make_inputs(*SHAPES[name], seed=11)
    want = expected(data)
    got = submission.custom_kernel(poisoned(data))
    torch.cuda.synchronize()
    for g, (out, ref) in enumerate(zip(got, want)):
        assert out.data_ptr() == data[0][g][2].data_ptr(), "must return the given c"
        torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3, msg=f"group {g}")


@needs_cuda
def test_new_tensors_with_the_same_shapes_get_fresh_pointers():
    shape = ((72, 128), (256, 256), (256, 512))
    first, second = make_inputs(*shape, seed=1), make_inputs(*shape, seed=2)
    submission.custom_kernel(first)
    got = submission.custom_kernel(poisoned(second))
    for out, ref in zip(got, expected(second)):
        torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)


@needs_cuda
def test_repeated_calls_never_block_the_host():
    data = make_inputs((96, 128), (128, 256), (256, 512))
    submission.custom_kernel(data)  # builds and caches the plan and the kernel
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            submission.custom_kernel(data)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
