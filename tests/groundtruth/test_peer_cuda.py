"""The peer CUDA route (groundtruth/peer_cuda.py): the tensor-map encoder, nvcc from PyPI, nvcc's PTX in the
emulator, launches through the stub driver, and twins checked against sources.

CI runs the project's own CUDA kernel (tests/groundtruth/peer_cuda_kernels.py) and synthetic sources only: the peers'
files carry no license and are not in the repository. With NVFP4_PEERS set to a folder holding them
(`NVFP4_PEERS/gau-nernst/submission_v6b.py`, from `git clone https://github.com/gau-nernst/gpu-mode-kernels`,
commit aee9cda, nvidia/nvfp4_group_gemm/), the tests marked `peer` also check the twin against the real file
and run it.
"""

import ctypes
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, missing

from emulator import tma
from groundtruth import peer_cuda, peers

import peer_cuda_kernels as K
import test_emulator_tma as vectors

PEERS = os.environ.get("NVFP4_PEERS")


def _words(hex_words: str) -> bytes:
    return vectors._words(hex_words)


# ---- the encoder: the decoder's exact inverse, and cuTensorMapEncodeTiled ----


@pytest.mark.parametrize("name", sorted(vectors.DSL_VECTORS))
def test_encode_reproduces_dsl_maps_from_their_fields(name):
    """The descriptors the DSL writes into a kernel's parameter buffer, byte for byte from their decoded
    fields (DSL 4.3.5 writes zeros past word 7)."""
    raw = _words(vectors.DSL_VECTORS[name])
    decoded = tma.decode_tensor_map(raw)
    assert tma.encode_fields(decoded) == raw
    assert tma.decode_tensor_map(tma.encode_fields(decoded)) == decoded


# hardware element format -> the driver's CUtensorMapDataType that encodes it (the tf32 bit picks TFLOAT32)
_DATA_TYPE = {"U8": 0, "U16": 1, "U32": 2, "S32": 3, "U64": 4, "S64": 5, "F16": 6, "F32": 7, "F64": 8, "BF16": 9,
              "F32_FTZ": 10, "B4X16": 13}


@pytest.mark.parametrize("name", sorted(vectors.DSL_VECTORS))
def test_a_dsl_map_is_what_cuTensorMapEncodeTiled_writes_for_its_tensor(name):
    """The DSL's host code encodes its maps itself; from the same tensor and box, the driver's encoder (tma.encode_tiled,
    the stub's) writes the same words 0-7 but for the two bits the DSL alone sets (word 1 bits 1 and 21)."""
    raw = _words(vectors.DSL_VECTORS[name])
    t = tma.decode_tensor_map(raw)
    data_type = 11 if t.round_to_tf32 else _DATA_TYPE[t.element_format.name]
    swizzle = {tma.SwizzleAtomicity.B16: int(t.swizzle)}.get(t.swizzle_atomicity,
                                                              3 + int(t.swizzle_atomicity))  # 128B_ATOM_*
    encoded = tma.encode_tiled(data_type, t.rank, t.global_address, t.dims, t.strides, t.box, t.element_strides,
                               t.interleave, swizzle, t.l2_promotion, t.oob_fill)
    dsl_bits = 1 << 1 | 1 << 21
    words = list(struct.unpack("<8Q", raw[:64]))
    words[1] &= ~dsl_bits
    assert struct.unpack("<8Q", encoded[:64]) == tuple(words)
    assert _stub_encode(_stub(), (data_type, t.rank, t.dims, t.strides, t.box, t.element_strides, int(t.interleave),
                                  swizzle, int(t.l2_promotion), int(t.oob_fill), t.global_address)) == (0, encoded)


@pytest.mark.parametrize("name", sorted(vectors.DRIVER_VECTORS))
def test_encode_reproduces_driver_maps_from_their_fields(name):
    raw = _words(vectors.DRIVER_VECTORS[name])
    assert tma.encode_fields(tma.decode_tensor_map(raw))[:64] == raw[:64]


def test_encode_then_decode_is_the_identity_on_any_words():
    rng = random.Random(5)
    for _ in range(500):
        words = [rng.getrandbits(64) for _ in range(8)]
        words[0] &= ((1 << 57) - 1) & ~0xF  # the address field: bits 4-56
        words[1] = words[1] & ~(7 << 4) | rng.randrange(5) << 4  # ranks 1-5
        raw = struct.pack("<8Q", *words) + bytes(64)
        assert tma.encode_fields(tma.decode_tensor_map(raw)) == raw


def test_encode_from_fields_round_trips():
    fields = dict(global_address=0x7F00_1234_5670, element_format=tma.ElementFormat.B4X16, dims=(256, 77, 28),
                  strides=(3584, 128), box=(256, 64, 1), element_strides=(1, 1, 1), swizzle=tma.Swizzle.B128)
    decoded = tma.decode_tensor_map(tma.encode_tensor_map(**fields))
    for key, value in fields.items():
        assert getattr(decoded, key) == value, key
    assert decoded.unknown_bits == (0,) * 8 and decoded.beyond_rank == (0,) * 8


# (CUtensorMapDataType, rank, dims, strides, box, element strides, interleave, swizzle, l2, oob): the driver
# vectors of tests/test_emulator_tma.py (CUDA 13.0 on an H100), as cuTensorMapEncodeTiled's arguments
DRIVER_CALLS = {
    "f16_sw128": (6, 2, (256, 100), (512,), (64, 8), (1, 1), 0, 3, 2, 0),
    "s32": (3, 2, (128, 100), (512,), (32, 8), (1, 1), 0, 3, 2, 0),
    "s64": (5, 2, (64, 100), (512,), (16, 8), (1, 1), 0, 3, 2, 0),
    "f32_ftz": (10, 2, (128, 100), (512,), (32, 8), (1, 1), 0, 3, 2, 0),
    "tf32": (11, 2, (128, 100), (512,), (32, 8), (1, 1), 0, 3, 2, 0),
    "tf32_ftz": (12, 2, (128, 100), (512,), (32, 8), (1, 1), 0, 3, 2, 0),
    "l2_none": (6, 2, (256, 100), (512,), (64, 8), (1, 1), 0, 3, 0, 0),
    "oob_nan": (6, 2, (256, 100), (512,), (64, 8), (1, 1), 0, 3, 2, 1),
    "estrides_r5": (6, 5, (256, 100, 3, 5, 7), (512, 51200, 153600, 768000), (64, 8, 2, 3, 4), (2, 3, 4, 5, 6), 0, 3,
                    2, 0),
    "big_strides_r5": (6, 5, (64, 3, 3, 3, 3), (2**36 + 16, 2**37 + 32, 3 * 2**37 + 48, 2**39 + 64), (64, 1, 1, 1, 1),
                       (1,) * 5, 0, 0, 2, 0),
    "interleave32": (6, 3, (16, 100, 3), (512, 51200), (16, 8, 2), (1, 1, 1), 2, 1, 2, 0),
}

# arguments cuTensorMapEncodeTiled refuses (CUDA_ERROR_INVALID_VALUE), one rule each
REFUSED_CALLS = {
    "rank 6": (6, 6, (8,) * 6, (16,) * 5, (8,) * 6, (1,) * 6, 0, 0, 0, 0),
    "misaligned address": (6, 2, (256, 100), (512,), (64, 8), (1, 1), 0, 3, 2, 0, 0x7F00_0000_1008),
    "stride not a multiple of 16": (6, 2, (256, 100), (520,), (64, 8), (1, 1), 0, 3, 2, 0),
    "box 257": (0, 2, (512, 100), (512,), (257, 8), (1, 1), 0, 0, 0, 0),
    "inner box beyond the swizzle span": (6, 2, (256, 100), (512,), (128, 8), (1, 1), 0, 3, 0, 0),
    "inner box not 16 bytes": (6, 2, (256, 100), (512,), (4, 8), (1, 1), 0, 0, 0, 0),
    "element stride 9": (6, 2, (256, 100), (512,), (64, 8), (1, 9), 0, 3, 0, 0),
    "NaN fill of integers": (3, 2, (128, 100), (512,), (32, 8), (1, 1), 0, 3, 0, 1),
    "dim 0": (6, 2, (0, 100), (512,), (64, 8), (1, 1), 0, 3, 0, 0),
}


def _call(args, address=vectors.DSL_ADDRESS):
    data_type, rank, dims, strides, box, estrides, interleave, swizzle, l2, oob = args[:10]
    return tma.encode_tiled(data_type, rank, args[10] if len(args) > 10 else address, dims, strides, box, estrides,
                            interleave, swizzle, l2, oob)


@pytest.mark.parametrize("name", sorted(DRIVER_CALLS))
def test_encode_tiled_writes_what_the_driver_wrote(name):
    assert _call(DRIVER_CALLS[name])[:64] == _words(vectors.DRIVER_VECTORS[name])[:64]


@pytest.mark.parametrize("rule", sorted(REFUSED_CALLS))
def test_encode_tiled_refuses_what_the_driver_refuses(rule):
    with pytest.raises(tma.TensorMapEncodeError):
        _call(REFUSED_CALLS[rule])


def _stub():
    from emulator import driver

    lib = ctypes.CDLL(str(driver.build() / "libcuda.so.1"))
    lib.cuTensorMapEncodeTiled.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p] + \
        [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4
    return lib


def _stub_encode(lib, args):
    data_type, rank, dims, strides, box, estrides, interleave, swizzle, l2, oob = args[:10]
    address = args[10] if len(args) > 10 else vectors.DSL_ADDRESS
    out = (ctypes.c_uint8 * 128)()
    result = lib.cuTensorMapEncodeTiled(
        out, data_type, rank, address, (ctypes.c_uint64 * 8)(*dims), (ctypes.c_uint64 * 8)(*strides),
        (ctypes.c_uint * 8)(*box), (ctypes.c_uint * 8)(*estrides), interleave, swizzle, l2, oob)
    return result, bytes(out)


def test_the_stub_drivers_encoder_agrees_with_tma_encode_tiled():
    """driver/custub.c's cuTensorMapEncodeTiled writes tma.encode_tiled's bytes and refuses what it refuses."""
    lib = _stub()
    for name, args in DRIVER_CALLS.items():
        assert _stub_encode(lib, args) == (0, _call(args)), name
    for rule, args in REFUSED_CALLS.items():
        assert _stub_encode(lib, args)[0] == tma.CUDA_ERROR_INVALID_VALUE, rule
    fp4 = (13, 3, (256, 200, 28), (3584, 128), (256, 64, 1), (1, 1, 1), 0, 3, 0, 0)  # packed FP4, 3-D
    assert _stub_encode(lib, fp4) == (0, _call(fp4))


# ---- the source: load_inline, flags, instances ----


def test_recognizes_a_load_inline_cuda_source_and_nothing_else():
    assert peer_cuda.recognizes(K.PYTHON_SOURCE)
    assert peers.route_for(K.PYTHON_SOURCE) is peer_cuda
    assert not peer_cuda.recognizes((ROOT / "submission.py").read_text())
    assert not peer_cuda.recognizes("load_inline('x', cpp_sources='', cuda_sources='int x;')")  # no __global__
    assert not peer_cuda.recognizes("def broken(:")
    src = peer_cuda.inline_source(K.PYTHON_SOURCE)
    assert src.no_implicit_headers and src.cuda.strip() == K.CUDA_SRC.strip()
    flags = peer_cuda.nvcc_flags(src)
    assert "-O3" in flags and "-std=c++17" in flags and not any(f.startswith(("-gencode", "-lineinfo")) for f in flags)


def test_mangled_instances_are_read_back_as_template_arguments():
    ptx = ".visible .entry _Z14kernel_cutlassILi8ELi128ELi4096ELi7168ELi8ELi2EEv9ArgumentsIXT_EEi(\n" \
          ".visible .entry _Z8tile_addILi128ELin8EEv6Paramsi(\n"
    assert peer_cuda.entries(ptx, "kernel_cutlass") == {(8, 128, 4096, 7168, 8, 2): ptx.split()[2][:-1]}
    assert list(peer_cuda.entries(ptx, "tile_add")) == [(128, -8)]
    assert peer_cuda.instantiation(peer_cuda.TWINS["gau-nernst v6b"], (2, 128, 256, 512, 8, 2)).endswith(
        "= (void *)&kernel_cutlass<2, 128, 256, 512, 8, 2>;")


# A source of the project's own with the facts a gau-nernst twin reads (not his code: the same declarations'
# shape, so that the checks' regular expressions have something to find)
SYNTHETIC = """
constexpr int BLOCK_N = 128;
constexpr int BLOCK_K = 256;
constexpr int NUM_WARPS = 6;
template <int NUM_GROUPS> struct Arguments {
  CUtensorMap A_tmap_list[NUM_GROUPS];
  CUtensorMap B_tmap_list[NUM_GROUPS];
  CUtensorMap SFA_tmap_list[NUM_GROUPS];
  CUtensorMap SFB_tmap_list[NUM_GROUPS];
  half *C_ptr_list[NUM_GROUPS];
  int M_list[NUM_GROUPS];
  int grid_m_cu[NUM_GROUPS + 1];
};
template <int NUM_GROUPS, int BLOCK_M, int N, int K, int NUM_STAGES, int CTA_GROUP>
__global__ void kernel_cutlass(const __grid_constant__ Arguments<NUM_GROUPS> args, int K_dyn) {}
void host() {
  init_AB_tmap(args.A_tmap_list + i, nullptr, 1, K, 128 / CTA_GROUP, BLOCK_K);
  reinterpret_cast<int *>(args.A_tmap_list + i)[9] = 0;
  reinterpret_cast<int *>(args.SFA_tmap_list + i)[8] = 0;
  const dim3 grid(grid_n, std::min(148 / grid_n, 1));
  constexpr int sm100_size = 227 * 1024;
  LAUNCH(8, 128, 4096, 7168, 2)
  LAUNCH(8, 256, 7168, 2048, 2)
  LAUNCH(2, 128, 3072, 4096, 2)
  LAUNCH(2, 128, 4096, 1536, 2)
}
"""


def test_a_twin_is_checked_against_the_source_it_mirrors():
    twin = peer_cuda.TWINS["gau-nernst v6b"]
    assert twin.check(SYNTHETIC) == []
    assert peer_cuda.identify(SYNTHETIC)[1] is twin
    for old, new, what in [("LAUNCH(2, 128, 4096, 1536, 2)", "LAUNCH(2, 256, 4096, 1536, 2)", "LAUNCH table"),
                           ("int M_list[NUM_GROUPS];", "long M_list[NUM_GROUPS];", "struct Arguments"),
                           ("BLOCK_K = 256", "BLOCK_K = 512", "BLOCK_K"),
                           ("[9] = 0", "[10] = 0", "A_tmap_list"),
                           ("148 / grid_n", "132 / grid_n", "SM budget"),
                           ("227 * 1024", "200 * 1024", "shared-memory budget"),
                           ("K, 128 / CTA_GROUP", "K, 64, ", "A's box rows")]:
        wrong = twin.check(SYNTHETIC.replace(old, new))
        assert len(wrong) == 1 and what in wrong[0], (what, wrong)
        with pytest.raises(peer_cuda.PeerRefused, match=what):
            peer_cuda.identify(SYNTHETIC.replace(old, new))
    # v6's host differs from v6b's in A's box alone, and identify tells them apart by it
    v6 = SYNTHETIC.replace("K, 128 / CTA_GROUP, BLOCK_K", "K, BLOCK_M / CTA_GROUP, BLOCK_K")
    assert peer_cuda.identify(v6)[0] == "gau-nernst v6" and peer_cuda.identify(SYNTHETIC)[0] == "gau-nernst v6b"


def test_the_twins_arithmetic_and_layout():
    twin = peer_cuda.TWINS["gau-nernst v6b"]
    layout, size = twin.layout(8)
    assert size == 4352 and layout["C_ptr_list"] == (4096, 64) and layout["grid_m_cu"] == (4192, 36)
    assert twin.layout(2)[1] == 1152  # nvcc 13.5's PTX declares .param .align 128 .b8 ..._param_0[1152]
    assert [twin.stages(row) for row in twin.launch_table] == [8, 5, 8, 8]
    assert twin.shared_bytes((2, 128, 4096, 1536, 2)) == 229540
    assert twin.grid((8, 128, 4096, 7168, 2), 11) == (32, 4, 1)
    assert twin.row(2, 256, 512) == (2, 128, 256, 512, 2) and not twin.in_table(twin.row(2, 256, 512))


# ---- the project's own CUDA kernel through nvcc, the stub driver and the emulator ----


def _toolkit():
    from groundtruth import cuda_toolkit

    try:
        cuda_toolkit.nvcc()
    except cuda_toolkit.ToolkitError as e:
        missing(str(e))
    return cuda_toolkit


def _run_tile_add(rows=32, defect=None, mode="eager"):
    """Compile tests/groundtruth/peer_cuda_kernels.py's kernel, run it through the stub driver as a C++ host would (maps
    from cuTensorMapEncodeTiled, the struct packed, cuLaunchKernel), emulate it. `defect` plants a host
    mistake. Returns (the emulator's verdict word, the output, the expected output)."""
    code = (
        "import sys, json, numpy as np\n"
        f"sys.path[:0] = {[str(ROOT), str(ROOT / 'tests'), str(ROOT / 'tests' / 'groundtruth')]!r}\n"
        "from emulator import driver\n"
        "driver.install()\n"
        "import emulator\n"
        f"from test_peer_cuda import tile_add_in_process\n"
        f"print(json.dumps(tile_add_in_process({rows}, {defect!r}, {mode!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def tile_add_in_process(rows: int, defect, mode: str) -> dict:
    """The body of _run_tile_add, in a process whose driver is the stub (emulator.driver.install())."""
    import emulator
    from emulator import driver
    from groundtruth import cuda_toolkit

    ptx = cuda_toolkit.compile_ptx(K.CUDA_SRC, "sm_100a", ["-O3", "-std=c++17"])
    cubin = cuda_toolkit.assemble(ptx)
    (entry,) = peer_cuda.entries(ptx, "tile_add").values()
    host = peer_cuda._Driver()
    function = host.load(cubin, entry)
    rng = np.random.default_rng(rows)
    inputs = [torch.from_numpy(rng.integers(0, 200, (rows, K.BOX_COLS), dtype=np.uint8)) for _ in range(2)]
    out = torch.zeros((rows, 2 * K.BOX_COLS), dtype=torch.uint8)
    box_rows = K.BOX_ROWS // 2 if defect == "box" else K.BOX_ROWS

    def tmap(t, cols):
        return host.encode_tiled(0, 2, t.data_ptr(), (cols, rows), (cols,), (K.BOX_COLS, box_rows), (1, 1), 0,
                                 peer_cuda.CU_TENSOR_MAP_SWIZZLE_128B, 0, 0)

    layout, size = peer_cuda.struct_layout(K.FIELDS)
    declared = peer_cuda.param_sizes(ptx, entry)[0]
    params = bytearray(size)
    def put(offset, data):
        params[offset:offset + len(data)] = data

    for i, t in enumerate(inputs):
        slot = 1 - i if defect == "offset" else i  # the planted defect: each map at the other's offset
        put(layout["in_maps"][0] + 128 * slot, tmap(t, K.BOX_COLS))
    put(layout["out_map"][0], tmap(out, 2 * K.BOX_COLS))
    put(layout["rows"][0], np.int32(rows).tobytes())
    put(layout["tile_bytes"][0], np.int32(K.BOX_COLS * K.BOX_ROWS).tobytes())
    from emulator.launch import execute, program_for, with_compiled_cluster

    driver.take_launches()
    host.launch(function, (2, rows // K.BOX_ROWS, 1), (K.THREADS, 1, 1), K.BOX_COLS * K.BOX_ROWS,
                [bytes(params), np.int32(1).tobytes()])
    (launch,) = driver.take_launches()
    emu = emulator.Emulator(mode=mode)
    emu.register(*inputs, out)
    expected = torch.cat([inputs[0] + 1, inputs[1] + 2], dim=1)
    try:
        execute(launch, ptx, emu.memory, mode=mode, step_budget=200_000)
        word = "PASS" if torch.equal(out, expected) else "FAIL"
    except emulator.HangError:
        word = "HANG"
    except emulator.EmulatorError as e:
        word = f"ERROR {e.kind}"
    ran = with_compiled_cluster(launch, program_for(ptx, launch.kernel_name).kernel).cluster
    return {"verdict": word, "declared": declared, "size": size, "cluster": [list(launch.cluster), list(ran)]}


def test_own_cuda_kernel_runs_through_nvcc_the_stub_driver_and_the_emulator():
    _toolkit()
    result = _run_tile_add()
    # the struct as the twin lays it out is the PTX's parameter; the <<<>>> launch names no cluster and the kernel
    # runs in the pairs its __cluster_dims__ compiled in (.reqnctapercluster)
    assert result == {"verdict": "PASS", "declared": 512, "size": 512, "cluster": [[1, 1, 1], [2, 1, 1]]}


def test_own_cuda_kernel_adversarial():
    _toolkit()
    assert _run_tile_add(rows=16, mode="adversarial")["verdict"] == "PASS"


@pytest.mark.parametrize("defect, verdict", [("offset", "FAIL"), ("box", "HANG")])
def test_a_planted_launch_defect_is_caught(defect, verdict):
    """A host that packs the struct's maps at each other's offsets (every CTA then reads the other input) or
    encodes a map with the wrong box (half the rows: the expect-tx count is never met)."""
    _toolkit()
    assert _run_tile_add(defect=defect)["verdict"] == verdict


def test_peer_command_refuses_a_file_it_does_not_run(tmp_path):
    other = tmp_path / "other.py"
    other.write_text("print('a submission of another kind')\n")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "peer", "--source", str(other),
                           "--spec", "m: [64]; n: [256]; k: [256]; g: 1; seed: 1"], capture_output=True, text=True,
                          timeout=120)
    # bad use: exit 2, one line on stderr, as every tool says it (issue 48, item 5)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, \
        done.stdout + done.stderr
    assert "not a kind of entry this tool runs" in done.stderr


def test_peer_command_refuses_a_cuda_entry_no_twin_mirrors(tmp_path):
    """A load_inline entry is recognized, but without a twin of its host code it is refused (bad use: exit 2, one
    line on stderr), naming why."""
    entry = tmp_path / "entry.py"
    entry.write_text(K.PYTHON_SOURCE)
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "peer", "--source", str(entry),
                           "--spec", "m: [64]; n: [256]; k: [256]; g: 1; seed: 1"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no twin of this source's host code" in done.stderr.strip().splitlines()[-1]


# ---- the peers' own files, where NVFP4_PEERS holds them ----


def _peer(name: str) -> Path:
    path = Path(PEERS or "/nonexistent") / name
    if not path.is_file():
        pytest.skip(f"{name} not in NVFP4_PEERS ({peer_cuda.SOURCES['gau-nernst']})")
    return path


@pytest.mark.parametrize("version", ["v5g", "v6", "v6b"])
def test_twin_matches_the_real_source(version):
    text = _peer(f"gau-nernst/submission_{version}.py").read_text()
    src = peer_cuda.inline_source(text)
    assert src is not None
    assert peer_cuda.identify(src.cuda)[0] == f"gau-nernst {version}"


def _emulate_peer(path, spec, *extra):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "peer", "--source", str(path),
                           "--spec", spec, *extra], capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("row", ["128,2", "256,2"])
def test_v6b_passes_a_small_spec(row):
    path = _peer("gau-nernst/submission_v6b.py")
    _toolkit()
    done = _emulate_peer(path, "m: [200, 76]; n: [256, 256]; k: [512, 512]; g: 2; seed: 1111", "--row", row)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith("PASS"), done.stdout + done.stderr


def _planted_case(twin, spec):
    """A v6b case with a planted twin, run once in eager mode in a process whose driver is the stub."""
    code = (
        "import sys, dataclasses\n"
        f"sys.path[:0] = {[str(ROOT), str(ROOT / 'tests'), str(ROOT / 'tests' / 'groundtruth')]!r}\n"
        "from emulator import driver\n"
        "driver.install()\n"
        "import emulator\n"
        "from groundtruth import peer_cuda\n"
        f"twin = dataclasses.replace(peer_cuda.TWINS['gau-nernst v6b'], **{twin!r})\n"
        f"case = peer_cuda.PeerCudaCase(open({str(_peer('gau-nernst/submission_v6b.py'))!r}).read(), {spec!r}, twin=twin)\n"
        "emu = emulator.Emulator(warp_roles=case.warp_roles, step_budget=2_000_000)\n"
        "case.register(emu)\n"
        "try:\n"
        "    emu.call(case.compiled, *case.args)\n"
        "    print(case.compare()[0])\n"
        "except emulator.HangError:\n"
        "    print('HANG')\n"
        "except emulator.EmulatorError as e:\n"
        "    print('ERROR', e.kind)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("planted, verdict", [
    # M - 1 written into A's dim-0 size word (int 8) instead of dim 1's (int 9): the 256-wide dim 0 shrinks, so
    # every row's bytes past M / 2 are filled with zeros
    ({"patches": {"A_tmap_list": (8,), "SFA_tmap_list": (8,)}}, "FAIL"),
    # A's box of 32 rows instead of 64: the TMA unit delivers fewer bytes than the expect-tx count
    ({"a_box_rows": "64 / CTA_GROUP"}, "HANG"),
])
def test_a_planted_twin_defect_in_v6b_is_caught(planted, verdict):
    _toolkit()
    assert _planted_case(planted, "m: [200, 76]; n: [256, 256]; k: [512, 512]; g: 2; seed: 1111") == verdict
