"""submission.py: contract validation, plan caching, the sm_100a compile and inspection, and (on a GPU) results.

CPU tests run everywhere. GPU tests run on whatever kernel the device gets (tcgen05 on 10.0, the
Hopper path on 9.0) and skip cleanly without CUDA.
"""

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import reference  # noqa: E402
import submission  # noqa: E402
from conftest import expected, poisoned  # noqa: E402

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
    "(a, b) without c": lambda d: ([d[0][0], d[0][1][:2]], d[1], d[2], d[3]),
    "sfa_reordered alone": lambda d: (d[0], d[1], [d[2][0], d[2][1][:1]], d[3]),
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


@pytest.mark.parametrize("planned", [False, pytest.param(True, marks=needs_cuda)])
def test_an_a_b_pair_gets_a_value_error_naming_the_group(planned):
    """Also when the signature's plan exists (on a GPU), where the call takes the fast path."""
    data = make_inputs((40, 72), (128, 256), (256, 512))
    if planned:
        submission.custom_kernel(data)
    broken = BROKEN["(a, b) without c"](data)
    before = [c.clone() for _, _, c in data[0]]
    with pytest.raises(ValueError, match=r"group 1 \(problem \(72, 256, 512, 1\)\): abc_tensors entry must be \(a, b, c\)"):
        submission.custom_kernel(broken)
    if planned:
        torch.cuda.synchronize()
    for (_, _, c), kept in zip(data[0], before):
        assert torch.equal(c, kept)


def test_n_must_be_a_multiple_of_the_weight_tile():
    data = make_inputs((64,), (192,), (256,))
    with pytest.raises(ValueError, match=r"group 0 \(problem \(64, 192, 256, 1\)\).*multiple of 128"):
        submission.validate_inputs(data)


def test_cpu_tensors_get_one_clear_error():
    """Misuse: the board's inputs built on the CPU. One line, naming what is needed."""
    data = make_inputs((64,), (128,), (256,))
    if data[0][0][0].is_cuda:
        data = tuple([tuple(t.cpu() for t in grp) for grp in part] for part in data[:3]) + (data[3],)
    with pytest.raises(ValueError, match=r"needs CUDA tensors on a B200 .* GPU; the inputs are on cpu") as info:
        submission.custom_kernel(data)
    assert "\n" not in str(info.value)


def test_launch_args_place_every_field_where_the_kernel_reads_it():
    """LaunchArgs: the host writes the 5G input addresses in gather order in one slice, the kernel
    reads them by name; the CuTe DSL argument list is int64s, int32s, then the stream."""
    import ctypes

    args = submission.LaunchArgs(3, group_addresses=("tokens",), addresses=("tiles",), integers=("num_tiles",))
    pointers = [1000 + i for i in range(15)]  # a0 b0 c0 a1 b1 c1 a2 b2 c2, sfa0 sfb0 sfa1 sfb1 sfa2 sfb2
    args.set_inputs(pointers)
    args.set("tokens", [70, 71, 72])
    args.set("tiles", 99)
    args.set("m", [1, 2, 3])
    args.set("k", [256, 512, 768])
    args.set("num_tiles", 5)
    layout = args.layout
    i64, i32 = list(args.i64), list(args.i32)

    def read(name, g):
        block, index = layout.index(name, g)
        return i64[index] if block == "i64" else i32[index]

    for g in range(3):
        assert [read(f, g) for f in submission.INPUT_FIELDS] == [1000 + 3 * g, 1001 + 3 * g, 1002 + 3 * g,
                                                                 1009 + 2 * g, 1010 + 2 * g]
        assert read("tokens", g) == 70 + g and read("m", g) == g + 1 and read("k", g) == 256 * (g + 1)
    assert i64[layout.slot("tiles")[1]] == 99 and i32[layout.slot("num_tiles")[1]] == 5
    pointers_c = args.__c_pointers__()
    assert len(pointers_c) == layout.num_i64 + layout.num_i32 + 1
    assert ctypes.c_int64.from_address(pointers_c[layout.index("sfb", 2)[1]]).value == 1014
    assert ctypes.c_void_p.from_address(pointers_c[-1]).value is None  # the stream, written per call
    single = submission.LaunchArgs(1, group_addresses=("tokens",))
    single.set("tokens", [5])  # a per-group field of one group is still a list
    assert single.i64[single.layout.slot("tokens")[1]] == 5


# ---------------------------------------------------------------- sm_100a inspection (CPU)

def inspection_rows(stdout: str) -> list[dict]:
    """The kernel rows of inspect_sm100.py's table, by column name."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["groups", "kernel"]).split()[:-1]
    rows = []
    for line in lines:
        cells = line.split(None, len(header))
        if len(cells) == len(header) + 1 and cells[0].isdigit():
            rows.append(dict(zip(header + ["verdict"], cells)))
    return rows


@pytest.mark.long
def test_every_group_count_compiles_for_sm100a_with_the_claimed_sass(shipped_inspection):
    """Compile G = 1, 2, 3, 4, 5, 8, 16, 32 for sm_100a and read PTX and SASS (no GPU involved); the compiles
    are shared with test_inspect_sm100's list (conftest.shipped_inspection). The quick set inspects G = 2."""
    run, tmp_path = shipped_inspection
    rows = inspection_rows(run.stdout)
    assert sorted({int(row["groups"]) for row in rows}) == list(inspect_sm100.DEFAULT_GROUPS), run.stdout + run.stderr
    gemm_rows = [row for row in rows if int(row["mma"]) > 0]
    assert {int(row["groups"]) for row in gemm_rows} == set(inspect_sm100.DEFAULT_GROUPS)
    for row in gemm_rows:
        assert int(row["threads"]) >= 192 and int(row["UTMALDG"]) > 0 and int(row["UTC*MMA"]) > 0
        assert row["LDL"] == row["STL"] == "0"
        assert int(row["smem_B"]) <= inspect_sm100.SM100_SMEM_PER_BLOCK
        assert row["verdict"] == "ok", run.stdout
    assert run.returncode == 0, run.stdout + run.stderr
    for groups in inspect_sm100.DEFAULT_GROUPS:  # --keep: every module's cubin, PTX and SASS
        sass = (tmp_path / f"g{groups}_c0.sass").read_text()
        assert "UTMALDG" in sass and (tmp_path / f"g{groups}_c0.cubin").stat().st_size > 0
        assert "tcgen05.mma" in (tmp_path / f"g{groups}_c0.ptx").read_text(errors="replace")


@pytest.mark.long  # README's quick command within 4 minutes (issue 47): its family keeps the one-variant inspection quick
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
def test_first_calls_on_new_tensors_never_block_the_host():
    """The board times the first call on its real inputs after checking clones: once a shape
    signature has run, never-seen tensors of that shape pass torch's sync debug mode 'error'."""
    shape = ((96, 128), (128, 256), (256, 512))
    submission.custom_kernel(make_inputs(*shape, seed=1))  # compiles and plans this signature
    fresh = [make_inputs(*shape, seed=s) for s in (2, 3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for data in fresh:
            submission.custom_kernel(poisoned(data))
        submission.custom_kernel(fresh[0])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    for data in fresh:
        for out, ref in zip([c for _, _, c in data[0]], expected(data)):
            torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
