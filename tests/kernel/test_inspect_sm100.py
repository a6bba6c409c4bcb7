"""tools/inspect_sm100.py's reading of PTX, SASS, resource usage and host IR, and its verdicts, on
synthetic text shaped like what CuTe DSL 4.3.5 and cuobjdump write; the checks each field of
submission.Sm100Config implies; how it loads a submission; and, at the end, issue 14's list of
configurations compiled from submission.py and inspected (tests/kernel/test_submission.py also compiles
the file's own configuration)."""
import argparse
import dataclasses
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import inspect_sm100 as tool  # noqa: E402

GEMM, PREP = "kernel_cutlass_kernel_gemm_0", "kernel_cutlass_kernel_prep_0"

PTX = f"""//
.version 8.8
.target sm_100a
.extern .shared .align 1024 .b8 __dynamic_shmem__0[];

.visible .entry {PREP}(
	.param .u64 {PREP}_param_0
)
.maxntid 128, 1, 1
{{
	tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r1], %rd2;
	ret;
}}

.visible .entry {GEMM}(
	.param .align 64 .b8 {GEMM}_param_0[128]
)
.reqntid 96, 2, 1
.minnctapersm 1
{{
	tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X [%r3], %rd4, %rd5, %r6, [%r7], [%r8], %p1;
	tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X [%r3], %rd4, %rd5, %r6, [%r7], [%r8], %p1;
	tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r9], %rs1;
	ret;
}}
"""

SASS = f"""
	code for sm_100a
	.target	sm_100a

		Function : {GEMM}
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM100 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM100)"
        /*0000*/                   UTMALDG.2D [UR8], [UR4] ;
        /*0010*/                   UTCCP.T.S.4x32dp128bit tmem[UR10], gdesc[UR12] ;
        /*0020*/                   UTCQMMA.2CTA gdesc[UR14], gdesc[UR16], tmem[UR18], tmem[UR20], idesc[UR21], UPT ;
        /*0030*/                   EXIT ;
		..........

		Function : {PREP}
        /*0000*/                   STL [R1], R2 ;
        /*0010*/                   EXIT ;
"""

USAGE = f"""
Resource usage:
 Common:
  GLOBAL:0
 Function {GEMM}:
  REG:168 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:2944 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function {PREP}:
  REG:24 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:900 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

IR = f"""module {{
  func.func @kernels_unrelated() {{
    %253 = arith.constant 7 : i32
  }}
  func.func @cutlass___call__(%arg0: !cuda.stream) {{
    %c0_i32 = arith.constant 0 : i32
    %253 = arith.extsi %c230400_i32 : i32 to i64
    %c192_i32 = arith.constant 192 : i32
    %254 = cuda.launch_cfg.create<max_attrs = 2 : i32> (blockDim = (%c192_i32, %c1_i32, %c1_i32), dynamicSmemBytes = %253, gridDim = (%c1_i32, %c1_i32, %c1_i32), stream = %arg0) : i32, i32, i32, i64, i32, i32, i32, !cuda.stream -> !cuda.launch_cfg<max_attrs = 2>
    %255 = cuda.launch_ex @kernels::@{GEMM}<%254> (%3, %div) : !cuda.launch_cfg<max_attrs = 2>, i32, i32 -> !cuda.result
    %300 = arith.constant 0 : i32
    %301 = arith.index_cast %300 : i32 to i64
    %302 = cuda.launch_cfg.create<max_attrs = 2 : i32> (blockDim = (%c192_i32, %c1_i32, %c1_i32), dynamicSmemBytes = %301, gridDim = (%c1_i32, %c1_i32, %c1_i32), stream = %arg0) : i32, i32, i32, i64, i32, i32, i32, !cuda.stream -> !cuda.launch_cfg<max_attrs = 2>
    %303 = cuda.launch_ex @kernels::@{PREP}<%302> (%3) : !cuda.launch_cfg<max_attrs = 2> -> !cuda.result
  }}
}}
"""


def test_ptx_is_split_per_kernel_with_its_thread_count():
    entries = tool.split_ptx_entries(PTX)
    assert list(entries) == [PREP, GEMM]
    assert "tensormap.replace" in entries[PREP] and "tensormap.replace" not in entries[GEMM]
    assert tool.ptx_threads(entries[GEMM]) == 192 and tool.ptx_threads(entries[PREP]) == 128
    assert tool.ptx_threads(".visible .entry k()\n{\n}\n") is None


def test_sass_and_resource_usage_are_split_per_kernel():
    functions = tool.split_sass_functions(SASS)
    assert list(functions) == [GEMM, PREP] and "STL" in functions[PREP] and "STL" not in functions[GEMM]
    usage = tool.parse_resource_usage(USAGE)
    assert usage[GEMM]["REG"] == 168 and usage[GEMM]["SHARED"] == 1024
    assert (usage[PREP]["STACK"], usage[PREP]["LOCAL"]) == (16, 8)


def test_dynamic_shared_memory_comes_from_each_launch_in_the_host_ir():
    assert tool.launch_dynamic_smem(IR) == {GEMM: 230400, PREP: 0}
    unknown = IR.replace("%253 = arith.extsi %c230400_i32", "%253 = arith.muli %x")
    assert tool.launch_dynamic_smem(unknown)[GEMM] is None


def test_a_module_reads_into_kernels_with_their_counts():
    gemm, prep = sorted(tool.kernels_of_module(PTX, SASS, USAGE, IR), key=lambda kernel: kernel.name)
    assert gemm.name == GEMM and gemm.issues_mma and not prep.issues_mma
    assert (gemm.threads, gemm.registers, gemm.smem) == (192, 168, 1024 + 230400)
    assert {key: gemm.counts[key] for key in ("mma", "mma_2cta", "tmap_repl", "UTC*MMA", "UTMALDG", "UTCCP", "STL")} == {
        "mma": 2, "mma_2cta": 2, "tmap_repl": 0, "UTC*MMA": 1, "UTMALDG": 1, "UTCCP": 1, "STL": 0}
    assert prep.counts["tmap_repl"] == 1 and prep.counts["STL"] == 1 and prep.local_bytes == 24


def gemm_kernel(**changes):
    counts = {"mma": 4, "mma_2cta": 4, "tmap_repl": 0, "UTC*MMA": 4, "UTMALDG": 8, "UTMASTG": 0, "UTCCP": 8,
              "LDL": 0, "STL": 0}
    counts.update(changes.pop("counts", {}))
    fields = dict(name=GEMM, threads=192, registers=168, local_bytes=0, static_smem=1024, dynamic_smem=200000,
                  counts=counts)
    fields.update(changes)
    return tool.Kernel(**fields)


@pytest.mark.parametrize("kernel, problem", [
    (gemm_kernel(), None),
    (gemm_kernel(counts={"mma_2cta": 0}), "tcgen05.mma is not cta_group::2 (0 of 4 are)"),
    (gemm_kernel(counts={"mma_2cta": 3}), "tcgen05.mma is not cta_group::2 (3 of 4 are)"),
    (gemm_kernel(counts={"tmap_repl": 3}), "the GEMM kernel rewrites tensor maps (3 tensormap.replace)"),
    (gemm_kernel(counts={"UTMALDG": 0}), "no TMA loads (UTMALDG)"),
    (gemm_kernel(counts={"UTC*MMA": 0}), "no block-scaled tcgen05 MMA in the SASS (UTC*MMA)"),
    (gemm_kernel(counts={"LDL": 2}), "spills to local memory (2 LDL, 0 STL, 0 B local)"),
    (gemm_kernel(local_bytes=32), "spills to local memory (0 LDL, 0 STL, 32 B local)"),
    (gemm_kernel(dynamic_smem=tool.SM100_SMEM_PER_BLOCK - 1024 + 1), "needs 232449 B of shared memory > 232448"),
    (gemm_kernel(dynamic_smem=None), "shared memory unknown: no launch of this kernel found in the host IR"),
    (gemm_kernel(threads=160), "160 threads per CTA, fewer than 192 (6 warps)"),
    (gemm_kernel(threads=None), "None threads per CTA, fewer than 192 (6 warps)"),
])
def test_each_check_fails_with_its_own_message(kernel, problem):
    assert tool.kernel_problems(kernel) == ([] if problem is None else [problem])


def test_gemm_only_checks_spare_a_helper_kernel():
    helper = gemm_kernel(name=PREP, threads=32, counts={"mma": 0, "mma_2cta": 0, "tmap_repl": 5, "UTC*MMA": 0,
                                                         "UTMALDG": 0})
    assert tool.kernel_problems(helper) == []
    assert tool.group_count_problems([helper]) == ["no kernel issues tcgen05.mma"]
    assert tool.group_count_problems([helper, gemm_kernel()]) == []


def test_group_counts_option():
    assert tool.parse_groups("1,2,32") == [1, 2, 32]
    assert list(tool.DEFAULT_GROUPS) == [1, 2, 3, 4, 5, 8, 16, 32]
    for bad in ("", "1,x", "0,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            tool.parse_groups(bad)


# ---------------------------------------------------------------- per-configuration expectations
# Lines as CuTe DSL 4.3.5 writes them for submission.py's SM100_SHIPPED and SM100_SAFE (G = 2).

SHIPPED_GEMM_PTX = """.visible .entry gemm(
)
.reqntid 192, 1, 1
{
	griddepcontrol.wait;
	// begin inline asm
	createpolicy.fractional.L2::evict_first.b64 %rd86, 1.0;
	// end inline asm
	// begin inline asm
	prefetch.tensormap [%rd89];
	// end inline asm
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint.cta_group::2 [%r548], [%rd98, {%r30, %r17}], [%r549], %rd99;
	cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint.cta_group::2 [%r561], [%rd109, {%r563, %r33, %r19}], [%r562], %rs3, %rd88;
	tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X [%r190], %rd63, %rd62, %r391, [%r162], [%r161], %p384;
	tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r424], %rs1;
	// begin inline asm
	tcgen05.ld.sync.aligned.32x32b.x32.b32 {%r1160, %r1161}, [%r1192];
tcgen05.wait::ld.sync.aligned;
	// end inline asm
	griddepcontrol.launch_dependents;
	ret;
}
"""

SAFE_GEMM_PTX = """.visible .entry gemm(
)
.reqntid 192, 1, 1
{
	mov.u64 	%rd55, 0;
	prefetch.tensormap [%rd58];
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%r441], [%rd86, {%r22, %r10}], [%r21], %rd55;
	tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%r208], %rd45, %rd44, %r364, [%r173], [%r172], %p272;
	tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r382];
	tcgen05.ld.sync.aligned.32x32b.x32.b32 {%r1185, %r1186}, [%r1190];
	tcgen05.wait::ld.sync.aligned;
	ret;
}
"""


def kernel_of_ptx(ptx, name=GEMM, tma_stores=None):
    """A kernel with these PTX counts and a clean SASS and resource usage; its SASS has tma_stores TMA
    stores (by default the shipped kernel's 4, epilogue="tma_last", for SHIPPED_GEMM_PTX, else none)."""
    tma_stores = (4 if ptx is SHIPPED_GEMM_PTX else 0) if tma_stores is None else tma_stores
    counts = {**tool.ptx_counts(ptx), "UTC*MMA": 4, "UTMALDG": 8, "UTMASTG": tma_stores, "UTCCP": 8, "LDL": 0, "STL": 0}
    return tool.Kernel(name=name, threads=tool.ptx_threads(ptx), registers=96, local_bytes=0, static_smem=1024,
                       dynamic_smem=200000, counts=counts)


def config(text):
    from submission import Sm100Config

    return Sm100Config.parse(text)


def test_shipped_and_safe_ptx_meet_their_configurations():
    assert tool.kernel_problems(kernel_of_ptx(SHIPPED_GEMM_PTX), config("shipped")) == []
    assert tool.kernel_problems(kernel_of_ptx(SAFE_GEMM_PTX), config("safe")) == []
    # The 2-CTA commit multicasts its arrival: not a multicast TMA load.
    counts = tool.ptx_counts(SHIPPED_GEMM_PTX)
    assert (counts["multicast"], counts["tma_load_multicast"]) == (2, 1)


@pytest.mark.parametrize("text, problem", [
    ("shipped,multicast=off,cluster_pairs=1",
     "multicast=off but 1 multicast TMA load (cp.async.bulk.tensor .multicast::cluster)"),
    ("shipped,pdl=off", "pdl=off but 2 griddepcontrol"),
    ("shipped,l2_hints=off", "l2_hints=off but 1 createpolicy"),
])
def test_a_switch_turned_off_fails_on_ptx_that_still_has_it(text, problem):
    assert tool.kernel_problems(kernel_of_ptx(SHIPPED_GEMM_PTX), config(text)) == [problem]


@pytest.mark.parametrize("text, problem", [
    ("safe,pdl=on", "pdl=on but no griddepcontrol"),
    ("safe,l2_hints=on", "l2_hints=on but no createpolicy"),
])
def test_a_switch_turned_on_fails_on_ptx_without_it(text, problem):
    assert tool.kernel_problems(kernel_of_ptx(SAFE_GEMM_PTX), config(text)) == [problem]


def test_each_epilogue_shows_its_tmem_loads_and_tma_stores():
    """tma_last: inline tcgen05.ld for every tile but the last, TMA stores for the last; atoms: neither."""
    assert tool.kernel_problems(kernel_of_ptx(SHIPPED_GEMM_PTX, tma_stores=0), config("shipped")) == [
        "epilogue=tma_last but no TMA store (UTMASTG)"]
    assert tool.kernel_problems(kernel_of_ptx(SHIPPED_GEMM_PTX), config("shipped,epilogue=atoms")) == [
        "epilogue=atoms but 1 inline-asm tcgen05.ld", "epilogue=atoms but 4 TMA store(s) (UTMASTG)"]
    stored = kernel_of_ptx(SAFE_GEMM_PTX)
    stored.counts["UTMASTG"] = 4
    assert tool.kernel_problems(stored, config("safe")) == ["epilogue=atoms but 4 TMA store(s) (UTMASTG)"]
    assert tool.kernel_problems(stored, config("safe,epilogue=tma_last")) == [
        "epilogue=tma_last but no inline-asm tcgen05.ld"]


def test_a_gemm_without_the_descriptor_prefetch_fails():
    no_prefetch = SAFE_GEMM_PTX.replace("\tprefetch.tensormap [%rd58];\n", "")
    assert tool.kernel_problems(kernel_of_ptx(no_prefetch), config("safe")) == [
        "no prefetch.tensormap (the TMA warp prefetches its first record's descriptors)"]


def test_the_mma_must_be_of_the_configurations_cta_group():
    assert tool.kernel_problems(kernel_of_ptx(SAFE_GEMM_PTX), config("safe,cta_group=2")) == [
        "tcgen05.mma is not cta_group::2 (0 of 1 are)"]
    assert tool.kernel_problems(kernel_of_ptx(SAFE_GEMM_PTX), config("safe,cta_group=2,multicast=on")) == [
        "tcgen05.mma is not cta_group::2 (0 of 1 are)",
        "multicast=on but no multicast TMA load (cp.async.bulk.tensor .multicast::cluster)"]
    assert tool.kernel_problems(kernel_of_ptx(SHIPPED_GEMM_PTX),
                                config("shipped,cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1")) == [
        "tcgen05.mma is not cta_group::1 (0 of 1 are)",
        "multicast=off but 1 multicast TMA load (cp.async.bulk.tensor .multicast::cluster)",
        "cta_group=1 but 4 cta_group::2", "cta_group=1 but 2 .multicast::cluster"]


def test_safe_forbids_any_pairing_multicast_pdl_and_policy():
    """What the issue asks of SM100_SAFE, on the shipped PTX: each one named."""
    assert tool.kernel_problems(kernel_of_ptx(SHIPPED_GEMM_PTX), config("safe")) == [
        "tcgen05.mma is not cta_group::1 (0 of 1 are)",
        "multicast=off but 1 multicast TMA load (cp.async.bulk.tensor .multicast::cluster)",
        "pdl=off but 2 griddepcontrol", "l2_hints=off but 1 createpolicy",
        "cta_group=1 but 4 cta_group::2", "cta_group=1 but 2 .multicast::cluster",
        "epilogue=atoms but 1 inline-asm tcgen05.ld", "epilogue=atoms but 4 TMA store(s) (UTMASTG)"]
    # A 2-CTA commit alone, no multicast load: still a pair.
    paired_commit = SAFE_GEMM_PTX.replace(
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r382];",
        "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r424], %rs1;")
    assert tool.kernel_problems(kernel_of_ptx(paired_commit), config("safe")) == [
        "cta_group=1 but 1 cta_group::2", "cta_group=1 but 1 .multicast::cluster"]


def test_a_helper_kernel_must_not_have_what_is_off_but_need_not_have_what_is_on():
    helper = ".visible .entry prep(\n)\n.maxntid 128, 1, 1\n{\n\tgriddepcontrol.wait;\n\tret;\n}\n"
    assert tool.kernel_problems(kernel_of_ptx(helper, PREP), config("safe")) == ["pdl=off but 1 griddepcontrol"]
    assert tool.kernel_problems(kernel_of_ptx(helper.replace("griddepcontrol.wait;", ""), PREP), config("shipped")) == []


def test_configurations_follow_the_submission():
    import submission

    assert tool.configurations(submission, None) == [config(submission.SM100_CONFIG)]
    assert tool.configurations(submission, ["safe", "shipped", "pdl=on"]) == [config("safe"), config("shipped")]
    with pytest.raises(ValueError):
        tool.configurations(submission, ["cta_group=3"])
    older = argparse.Namespace(compile_sm100=lambda num_groups: None)  # a submission without configurations
    assert tool.configurations(older, None) == [None]
    with pytest.raises(ValueError, match="--config needs a submission that defines Sm100Config"):
        tool.configurations(older, ["safe"])


# ---------------------------------------------------------------- every configuration compiled (CPU)

# Each switch of SM100_SHIPPED flipped alone, with what the flip needs (submission.NEEDS): toward
# SM100_SAFE's value, and for `jobs` and `token_variants` each other value.
SINGLE_SWITCHES = ("cta_group=1,token_variants=64/128,multicast=off,cluster_pairs=1", "token_variants=64/128",
                   "token_variants=128", "multicast=off,cluster_pairs=1", "pdl=off", "l2_hints=off", "epilogue=atoms",
                   "descriptors=branch", "jobs=hybrid", "jobs=weight_blocks", "warmers=off", "self_warm=off",
                   "cluster_pairs=1", "lean_walk=off")
COVERAGE = (  # (--groups, --config ...): issue 14's list
    ("1,2,3,4,5,8,16,32", ("shipped",)),
    ("2,8", ("safe",)),
    ("2", SINGLE_SWITCHES),
)
QUICK_COVERAGE = (("2", ("shipped", "safe")),)  # README's test command: both ends, one process


def test_single_switches_flip_every_field_toward_safe():
    from submission import EPILOGUE_KINDS, JOB_POLICIES, SM100_SAFE, SM100_SHIPPED, TOKEN_VARIANT_SETS, Sm100Config

    flipped = {}
    for text in SINGLE_SWITCHES:
        field, _, value_text = text.split(",")[0].partition("=")
        value = getattr(config(text), field)
        flipped.setdefault(field, []).append(value)
        # the text is the flip with exactly what it needs, nothing else
        assert config(text) == SM100_SHIPPED.with_needs(**{field: value}), text
        assert sorted(config(text).changes_from(SM100_SHIPPED)) == sorted(text.split(","))
    assert set(flipped) == {field.name for field in dataclasses.fields(Sm100Config)}
    for field, values in flipped.items():
        if getattr(SM100_SAFE, field) != getattr(SM100_SHIPPED, field):
            # jobs, epilogue and token_variants are flipped to every other value (below), SM100_SAFE's among them
            assert values == [getattr(SM100_SAFE, field)] or field in ("jobs", "epilogue", "token_variants") and \
                getattr(SM100_SAFE, field) in values, field
    assert set(flipped["jobs"]) == set(JOB_POLICIES) - {SM100_SHIPPED.jobs}
    assert set(flipped["epilogue"]) == set(EPILOGUE_KINDS) - {SM100_SHIPPED.epilogue}
    assert set(flipped["token_variants"]) == set(TOKEN_VARIANT_SETS) - {SM100_SHIPPED.token_variants}


def coverage_rows(stdout: str) -> list[dict]:
    """The kernel rows of inspect_sm100.py's table, by column name."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split()[:3] == ["groups", "kernel", "config"]).split()
    rows = [line.split(None, len(header) - 1) for line in lines]
    return [dict(zip(header, cells)) for cells in rows if len(cells) == len(header) and cells[0].isdigit()]


@pytest.mark.parametrize("coverage", [QUICK_COVERAGE, pytest.param(COVERAGE, marks=pytest.mark.long)],
                         ids=["shipped-and-safe", "issue-14-list"])
def test_every_configuration_compiles_and_passes_its_checks(coverage, request):
    """Issue 14's CI list compiled for sm_100a and inspected (no GPU), under `-m long`: the shipped
    configuration for every group count (conftest.shipped_inspection, shared with test_submission), the safe
    one for G = 2 and 8, each single switch for G = 2, two processes at once (CI has 2 cores). The quick set:
    shipped and safe for G = 2."""
    runs = [request.getfixturevalue("shipped_inspection")[0] if (groups, texts) == COVERAGE[0] else
            subprocess.Popen([sys.executable, str(ROOT / "tools" / "inspect_sm100.py"), "--groups", groups,
                              *(arg for text in texts for arg in ("--config", text))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            for groups, texts in coverage]
    for run, (groups, texts) in zip(runs, coverage):
        stdout, stderr = (run.stdout, run.stderr) if isinstance(run, subprocess.CompletedProcess) else \
            run.communicate(timeout=600)
        rows = coverage_rows(stdout)
        expected = {(config(text).describe(), int(g)) for text in texts for g in groups.split(",")}
        assert {(row["config"], int(row["groups"])) for row in rows} == expected, stdout + stderr
        assert not re.search(r"^k\d+: ", stdout, re.MULTILINE)  # no legend of 200-character names (issue 21)
        for row in rows:
            assert row["verdict"] == "ok", row
            assert row["kernel"] == "Sm100GroupedGemm.kernel", row
            assert int(row["mma"]) > 0 and int(row["UTMALDG"]) > 0 and int(row["UTC*MMA"]) > 0, row
            assert int(row["mma_2cta"]) == (int(row["mma"]) if config(row["config"]).cta_group == 2 else 0), row
        assert run.returncode == 0, stdout + stderr
        assert stdout.splitlines()[-1] == f"PASS: {len(expected)} compile(s) inspected", stdout  # the verdict last


def run_tool(submission, tmp_path):
    """inspect_sm100.py on `submission` with its own temp dir, from a directory outside the repository."""
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "inspect_sm100.py"), "--submission", str(submission)],
                          cwd=tmp_path, env=dict(os.environ, TMPDIR=str(temp)), capture_output=True, text=True,
                          timeout=300)
    return done, sorted(path.name for path in temp.iterdir())


def test_a_submission_outside_the_repository_imports_the_board_files(tmp_path):
    """Like the board's template, it starts with `from task import ...`; it has no sm_100a kernel."""
    (tmp_path / "subs").mkdir()
    submission = tmp_path / "subs" / "v3.py"
    submission.write_text("from task import input_t, output_t\nfrom reference import ref_kernel\n\n\n"
                          "def custom_kernel(data: input_t) -> output_t:\n    return ref_kernel(data)\n")
    done, left = run_tool(submission, tmp_path)
    assert done.returncode == 2 and "defines no compile_sm100" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and left == []


def test_a_submission_that_fails_to_import_leaves_no_temp_folder(tmp_path):
    submission = tmp_path / "broken.py"
    submission.write_text("import no_such_module_here\n")
    done, left = run_tool(submission, tmp_path)
    # bad use, as in every tool (issue 48, item 5): one line, exit 2
    assert done.returncode == 2 and "No module named 'no_such_module_here'" in done.stderr
    assert done.stderr.count("\n") == 1 and left == []


def test_a_bad_configuration_leaves_no_temp_folder(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "inspect_sm100.py"), "--config", "shipped,no_such=1"],
                          env=dict(os.environ, TMPDIR=str(temp)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "no_such" in done.stderr, done.stderr
    assert list(temp.glob("inspect_sm100_*")) == []  # (CuTe DSL keeps a cache folder there too)


@pytest.mark.long  # the quick suite's budget (issue 26): CI runs it under -m long
def test_keep_writes_one_folder_per_configuration(tmp_path):
    """A configuration's text holds "/" (token_variants=64/128): its folder is still one folder."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "inspect_sm100.py"), "--groups", "1",
                           "--config", "safe", "--config", "safe,token_variants=64/128", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["safe", "safe,token_variants=64+128"]
    assert all(len(list(folder.glob("g1_c*.ptx"))) == 1 for folder in tmp_path.iterdir())


# ---------------------------------------------------------------- labels and the SM100_CONFIG line (issue 21)

DSL_NAME = ("kernel_cutlass_kernel_submissionSm100GroupedGemm_object_at__Copy_Atom_ThrID_21_TV_Layout_Src_"
            "232768327681_TV_Layout_Dst_232768327681_Value_type_f4E2M1FN_Copy_Atom_ThrID_21_TV_Layout_Src_2_0")


def test_a_kernel_is_named_by_its_class_and_method_not_by_its_arguments():
    assert tool.short_kernel_name(DSL_NAME) == "Sm100GroupedGemm.kernel"
    assert tool.short_kernel_name(DSL_NAME.replace("submission", "v2"), "v2") == "Sm100GroupedGemm.kernel"
    assert tool.short_kernel_name(GEMM) == "kernel_gemm_0"
    long = tool.short_kernel_name("kernel_cutlass_" + "x" * 80)
    assert len(long) == 32 and long.endswith("...")


def _inspect_with_line(tmp_path, line, *args):
    path = tmp_path / "submission.py"
    path.write_text((ROOT / "submission.py").read_text().replace('SM100_CONFIG = "shipped"', line, 1))
    return subprocess.run([sys.executable, str(ROOT / "tools" / "inspect_sm100.py"), "--submission", str(path),
                           "--groups", "1", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("line, code, said", [
    ('SM100_CONFIG = "bogus"', 2, "of submission.py (`SM100_CONFIG = \"bogus\"`): unknown configuration 'bogus'"),
    ("SM100_CONFIG = shipped", 2, "(`SM100_CONFIG = shipped`): SM100_CONFIG must be a quoted text"),
    ('SM100_CONFIG = "shipped"\nimport no_such_module_here', 2,
     "cannot import submission.py: ModuleNotFoundError: No module named 'no_such_module_here' (at submission.py:"),
])
def test_a_malformed_config_line_is_one_line(tmp_path, line, code, said):
    done = _inspect_with_line(tmp_path, line)
    assert done.returncode == code and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_the_cublas_rung_has_nothing_to_inspect(tmp_path):
    done = _inspect_with_line(tmp_path, 'SM100_CONFIG = "cublas"')
    assert done.returncode == 0 and "nothing to inspect" in done.stdout and done.stdout.count("\n") == 1
    done = _inspect_with_line(tmp_path, 'SM100_CONFIG = "shipped"', "--config", "cublas")
    assert done.returncode == 2 and done.stderr == ("inspect_sm100.py: --config cublas: the cuBLAS rung has no "
                                                    "sm_100a kernel to inspect\n")
