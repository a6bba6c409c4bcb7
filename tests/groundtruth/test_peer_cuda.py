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
    """Integers (`Li8E`, negative `Lin8E`) and enumerators (`L6Raster1E`: Raster::N, by value), as nvcc 13.5
    mangles them."""
    ptx = ".visible .entry _Z14kernel_cutlassILi8ELi128ELi4096ELi7168ELi8ELi2EEv9ArgumentsIXT_EEi(\n" \
          ".visible .entry _Z8tile_addILi128ELin8EEv6Paramsi(\n" \
          ".visible .entry _Z14kernel_cutlassILi2ELi128ELi3072ELi4096ELi8ELi2EL6Raster0EEv9ArgumentsIXT_EEi(\n"
    assert peer_cuda.entries(ptx, "kernel_cutlass") == {(8, 128, 4096, 7168, 8, 2): ptx.split()[2][:-1],
                                                        (2, 128, 3072, 4096, 8, 2, 0): ptx.split()[8][:-1]}
    assert list(peer_cuda.entries(ptx, "tile_add")) == [(128, -8)]
    assert peer_cuda.instantiation(peer_cuda.TWINS["gau-nernst v6b"], (2, 128, 256, 512, 8, 2)).endswith(
        "= (void *)&kernel_cutlass<2, 128, 256, 512, 8, 2>;")
    assert peer_cuda.instantiation(peer_cuda.TWINS["gau-nernst v2d"], (2, 128, 256, 512, 8, 2, "Raster::M")) == (
        "static void *nvfp4_emulator_instance_2_128_256_512_8_2_Raster_M = "
        "(void *)&kernel_cutlass<2, 128, 256, 512, 8, 2, Raster::M>;")


# A source of the project's own with the facts a twin states (not a peer's code: declarations of the same shape,
# written from the twin's data, so that host_facts' regular expressions have something to find)


def render(twin) -> tuple:
    """(CUDA text, Python text) stating exactly `twin`'s facts in the shape gau-nernst's files give them."""
    out = [f"constexpr int {name} = {value};" for name, value in twin.constants.items()]
    out.append(f"constexpr int TB_SIZE = {twin.block};")
    out += [f"enum class {name} {{ {', '.join(values)} }};" for name, values in twin.enums.items()]
    out.append("template <int NUM_GROUPS>\nstruct Arguments {")
    out += [f"  {ctype}{'' if ctype.endswith('*') else ' '}{name}[{count}];" for name, ctype, count in twin.fields]
    out.append("};")
    out.append(f"template <{', '.join('int ' + p for p in twin.template)}>\n__global__")
    if twin.cluster_dims:
        out.append(f"__cluster_dims__({twin.cluster_dims})")
    out.append(f"__launch_bounds__(TB_SIZE)\nvoid {twin.kernel}(const __grid_constant__ Arguments<NUM_GROUPS> args, "
               "int K_dyn) {")
    named = [(k, v) for k, v in twin.roles.items() if k != "else"]
    for i, (k, role) in enumerate(named):
        out.append(f"  {'else ' if i else ''}if (warp_id == {k}) {{\n    // {role} warp\n  }}")
    if "else" in twin.roles:
        out.append("  else {\n    // epilogue warps\n  }")
    out.append("}")
    for name, h in twin.helpers.items():
        out.append(f"void {name}(CUtensorMap *tmap, void *ptr, {', '.join('uint64_t ' + p for p in h.params)}) {{")
        out += [f"  {'' if n in h.params else 'const uint64_t '}{n} = {e};" for n, e in h.statements]
        for array, values in (("globalDim[rank]", h.dims), ("globalStrides[rank-1]", h.strides),
                              ("boxDim[rank]", h.box), ("elementStrides[rank]", h.element_strides)):
            out.append(f"  uint64_t {array} = {{{', '.join(values)}}};")
        out.append(f"  auto err = cuTensorMapEncodeTiled(tmap, CU_TENSOR_MAP_DATA_TYPE_{h.data_type}, rank, ptr, "
                   f"globalDim, globalStrides, boxDim, elementStrides, CU_TENSOR_MAP_INTERLEAVE_{h.interleave}, "
                   f"CU_TENSOR_MAP_SWIZZLE_{h.swizzle}, CU_TENSOR_MAP_L2_PROMOTION_{h.l2}, "
                   f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{h.oob});\n}}")
    call = lambda m: f"    {m.helper}(args.{m.member} + i, {m.pointer}, {', '.join(m.args)});"  # noqa: E731
    if twin.static_args:
        out.append("template <int NUM_GROUPS>\nArguments<NUM_GROUPS> create_args_template() {\n  Arguments<NUM_GROUPS> "
                   "args;\n  for (int i = 0; i < NUM_GROUPS; i++) {")
        out += [call(m) for m in twin.maps if m.pointer == "nullptr"]
        out.append("  }\n  return args;\n}")
    out.append(f"template <{', '.join('int ' + p for p in twin.launch_params)}>\nvoid group_gemm_launch(at::TensorList "
               "A_list) {")
    out += [f"  constexpr int {name} = {expr};" for name, expr in twin.arithmetic]
    out.append("  static Arguments<NUM_GROUPS> args = create_args_template<NUM_GROUPS>();" if twin.static_args else
               "  Arguments<NUM_GROUPS> args;")
    if twin.sort:
        out.append("  int values[NUM_GROUPS];\n  for (int i = 0; i < NUM_GROUPS; i++) {\n    values[i] = "
                   "A_list[i].size(0);\n  }\n  int indices[NUM_GROUPS];\n  argsort_desc<NUM_GROUPS>(values, indices);")
    out.append("  for (int i = 0; i < NUM_GROUPS; i++) {")
    out += [f"    const int {name} = {expr};" for name, expr in twin.group_values]
    out += [call(m) for m in twin.maps if m.pointer != "nullptr"]
    out += [f"    reinterpret_cast<void **>(args.{m} + i)[0] = {e};" for m, e in twin.addresses.items()]
    out += [f"    reinterpret_cast<int *>(args.{m} + i)[{w}] = {e};" for m, ws in twin.patches.items() for w, e in ws.items()]
    out += [f"    args.{m}[i] = reinterpret_cast<char *>({e});" for m, e in twin.pointers.items()]
    out += [f"    args.{m}[i] = {e};" for m, e in twin.scalars.items()]
    if twin.cumulative:
        out.append(f"    args.{twin.cumulative[0]}[i + 1] = args.{twin.cumulative[0]}[i] + {twin.cumulative[1]};")
    out += [f"    {name} = {expr};" for name, expr in twin.reductions]
    out.append("  }")
    out.append(f"  const dim3 grid({', '.join(twin.grid)});" if len(twin.grid) > 1 else
               f"  const int grid = {twin.grid[0]};")
    out.append(f"  auto this_kernel = {twin.kernel}<{', '.join(twin.instance)}>;")
    out.append(f"  this_kernel<<<{', '.join(twin.launch)}>>>({', '.join(twin.kernel_args)});\n}}")
    macro = [p + "_" for p in twin.launch_params]
    condition = " && ".join(f"{runtime} == {param}_" for runtime, param in twin.dispatch.items())
    out.append(f"void group_gemm(at::TensorList A_list) {{\n#define LAUNCH({', '.join(macro)}) \\\n  else if ({condition}) "
               f"{{ \\\n    group_gemm_launch<{', '.join(macro)}>(A_list); \\\n  }}\n  if (false) {{}}")
    out += [f"  LAUNCH({', '.join(str(x) for x in row)})" for row in twin.launch_table]
    out.append("}")
    python = ["def custom_kernel(data):", "    _, N0, K0, _ = shape_list[0]"]
    if twin.output == "m_major16":
        python.append("    new_C = new_C.as_strided((M, N, 1), (1, new_M, 0))")
    if twin.mixed_nk == "scaled_mm":
        python.append("    for _, N, K, _ in shape_list:\n        if N != N0 or K != K0:\n            ref(A_list)")
    return "\n".join(out) + "\n", "\n".join(python) + "\n"


@pytest.mark.parametrize("name", sorted(peer_cuda.TWINS))
def test_every_twin_is_read_back_from_a_source_stating_its_facts(name):
    """host_facts reads every fact of a source written from the twin's data, and no other twin matches it: the
    twins are told apart by what their sources say (v5e and v5g by their kernels' cluster shape alone)."""
    twin = peer_cuda.TWINS[name]
    cuda, python = render(twin)
    assert twin.check(cuda, python) == []
    assert peer_cuda.identify(cuda, python) == (name, twin)
    assert [n for n, t in peer_cuda.TWINS.items() if not t.check(cuda, python)] == [name]


V6B = render(peer_cuda.TWINS["gau-nernst v6b"])


@pytest.mark.parametrize("old, new, what", [
    ("LAUNCH(2, 128, 4096, 1536, 2)", "LAUNCH(2, 256, 4096, 1536, 2)", "LAUNCH table"),
    ("int M_list[NUM_GROUPS];", "long M_list[NUM_GROUPS];", "struct members"),
    ("BLOCK_K = 256", "BLOCK_K = 512", "constant BLOCK_K"),
    ("(args.A_tmap_list + i)[9]", "(args.A_tmap_list + i)[10]", "A_tmap_list: int words patched"),
    ("148 / grid_n", "132 / grid_n", "grid"),
    ("227 * 1024", "200 * 1024", "host arithmetic sm100_size"),
    ("K, 128 / CTA_GROUP, BLOCK_K", "K, 64, BLOCK_K", "map encodes"),
    ("__cluster_dims__(CTA_GROUP, 1, 1)", "__cluster_dims__(2, 1, 1)", "__cluster_dims__"),
    ("argsort_desc<NUM_GROUPS>(values, indices);", "", "sorted by M"),
    ("// MMA warp", "// math warp", "warp roles"),
    ("boxDim[rank] = {SF_size / 8}", "boxDim[rank] = {SF_size / 16}", "map helpers"),
    ("args.M_list[i] = M;", "args.M_list[i] = M;\n    args.M_list[i] += 1;", "host statements no twin reads"),
    ("this_kernel<<<grid, TB_SIZE, smem_size>>>(args, K)", "this_kernel<<<grid, TB_SIZE, smem_size>>>(args)",
     "kernel arguments"),
])
def test_a_twin_is_checked_against_the_source_it_mirrors(old, new, what):
    twin = peer_cuda.TWINS["gau-nernst v6b"]
    cuda, python = V6B
    assert old in cuda
    wrong = twin.check(cuda.replace(old, new), python)
    assert len(wrong) == 1 and what in wrong[0], (what, wrong)
    with pytest.raises(peer_cuda.PeerRefused, match="no twin"):
        peer_cuda.identify(cuda.replace(old, new), python)


def test_the_python_around_the_cuda_is_checked_when_given():
    """custom_kernel's own C (M-major, padded) and its torch._scaled_mm fallback are facts of the twin too."""
    twin = peer_cuda.TWINS["gau-nernst v6b"]
    cuda, python = V6B
    assert twin.check(cuda) == []  # no Python: not checked
    wrong = twin.check(cuda, python.replace("(1, new_M, 0)", "(N, 1, 0)"))
    assert len(wrong) == 1 and "custom_kernel's C" in wrong[0]
    wrong = twin.check(cuda, python.replace("ref(A_list)", "pass"))
    assert len(wrong) == 1 and "mixed N or K" in wrong[0]


def test_cxx_expressions_evaluate_as_the_host_does():
    env = {"M": 200, "K": 512, "BLOCK_M": 128, "N": 4096, "grid_n": 32, "args_grid_cu": [0, 2, 3], "NUM_GROUPS": 2}
    ev = peer_cuda.cxx_eval
    assert ev("(cdiv(M, 128) * 128 * K / 16) - 1", env) == 2 * 128 * 512 // 16 - 1
    assert ev("std::min(148 / grid_n * grid_n, args.grid_cu[NUM_GROUPS])", env) == 3
    assert ev("std::max(0, M - 1)", env) == 199 and ev("N / BLOCK_M / 3", env) == 10  # truncating division
    assert peer_cuda.squeeze(" a * ( b / 2 ) ") == "a*(b/2)"
    assert peer_cuda._split_top("f(a, b), std::min<int>(c, d), e") == ["f(a, b)", "std::min<int>(c, d)", "e"]


def test_the_twins_arithmetic_and_layout():
    t = peer_cuda.TWINS
    v6b = t["gau-nernst v6b"]
    layout, size = v6b.layout(8)
    assert size == 4352 and layout["C_ptr_list"] == (4096, 64) and layout["grid_m_cu"] == (4192, 36)
    assert v6b.layout(2)[1] == 1152  # nvcc 13.5's PTX declares .param .align 128 .b8 ..._param_0[1152]
    rows = lambda twin: [dict(zip(twin.launch_params, r)) for r in twin.launch_table]  # noqa: E731
    assert [v6b.stages(r) for r in rows(v6b)] == [8, 5, 8, 8]
    assert v6b.shared_bytes({"NUM_GROUPS": 2, "BLOCK_M": 128, "N": 4096, "K": 1536, "CTA_GROUP": 2}) == 229540
    assert v6b.row(2, 256, 512) == {"NUM_GROUPS": 2, "BLOCK_M": 128, "N": 256, "K": 512, "CTA_GROUP": 2}
    assert not v6b.in_table(v6b.row(2, 256, 512)) and v6b.in_table(v6b.row(2, 4096, 1536))
    assert v6b.row(2, 256, 512, {"BLOCK_M": 256})["BLOCK_M"] == 256
    # stages: v1 and v2 (A and B of 128 rows, one mbarrier pair), v2e (BLOCK_N 256 on benchmark 2), v5c (the CLC
    # response and its two mbarriers outside the stages), v2d (2-SM on benchmark 3: half of B per CTA)
    assert [t["gau-nernst v1"].stages(r) for r in rows(t["gau-nernst v1"])] == [6, 6, 6, 6]
    assert [t["gau-nernst v2e"].stages(r) for r in rows(t["gau-nernst v2e"])] == [6, 4, 6, 6]
    assert [t["gau-nernst v2d"].stages(r) for r in rows(t["gau-nernst v2d"])] == [6, 4, 8, 6]
    assert [t["gau-nernst v5"].stages(r) for r in rows(t["gau-nernst v5"])] == [8, 8, 8, 6]
    assert t["gau-nernst v5c"].shared_bytes(rows(t["gau-nernst v5c"])[0]) == 229572
    assert t["gau-nernst v1"].layout(8)[1] == 2432 and t["gau-nernst v2e"].layout(2)[1] == 640
    # enumerators: by name in the source, by value in the mangled name
    v2d = t["gau-nernst v2d"]
    args = v2d.template_args(rows(v2d)[2])
    assert args == (2, 128, 3072, 4096, 8, 2, "Raster::M") and v2d.mangled(args) == (2, 128, 3072, 4096, 8, 2, 0)
    assert t["gau-nernst v5c"].warp_roles == {0: "epilogue", 1: "epilogue", 2: "epilogue", 3: "epilogue",
                                               4: "scheduler", 5: "TMA", 6: "MMA"}


def test_a_row_outside_the_table():
    """The launch parameters the dispatch does not compare come from the twin's default or the override; a
    constant of the version cannot be overridden with another value, nor a name it does not have."""
    t = peer_cuda.TWINS
    assert t["gau-nernst v1"].row(5, 256, 512) == {"NUM_GROUPS": 5}  # v1 dispatches on G alone
    assert t["gau-nernst v1"].in_table(t["gau-nernst v1"].row(8, 123, 456))
    v2d = t["gau-nernst v2d"]
    assert v2d.row(2, 256, 512, {"CTA_GROUP": 2, "NUM_BLOCKS": 148}) == {
        "NUM_GROUPS": 2, "BLOCK_N": 128, "N": 256, "K": 512, "CTA_GROUP": 2, "NUM_BLOCKS": 148, "raster": "Raster::M"}
    assert t["gau-nernst v5g"].row(2, 256, 512, {"BLOCK_M": 128, "CTA_GROUP": 1})["CTA_GROUP"] == 1
    with pytest.raises(peer_cuda.PeerRefused, match="BLOCK_M is 128 in this version"):
        t["gau-nernst v5g"].row(2, 256, 512, {"BLOCK_M": 256, "CTA_GROUP": 2})
    with pytest.raises(peer_cuda.PeerRefused, match="CTA_GROUP is no launch parameter"):
        t["gau-nernst v2e"].row(2, 256, 512, {"CTA_GROUP": 2})


class _FakeDriver:
    """The stub driver's two entry points a host calls, recorded: each encode returns a map whose bytes say
    which call it was (its index in word 2, its arguments kept), the launch is kept."""

    def __init__(self):
        self.encodes, self.launches = [], []

    def encode_tiled(self, *arguments):
        self.encodes.append(arguments)
        return struct.pack("<3Q", arguments[2], 0, len(self.encodes)) + bytes(104)

    def launch(self, function, grid, block, shared, params):
        self.launches.append((grid, block, shared, params))


def _groups(ms, n, k):
    """Tensors shaped as custom_kernel hands them to the C++ (A: M x K/2 x 1 bytes, B: N x K/2 x 1, ...)."""
    return [{"A": torch.zeros(m, k // 2, 1, dtype=torch.uint8), "B": torch.zeros(n, k // 2, 1, dtype=torch.uint8),
             "SFA": torch.zeros(m, k // 16, dtype=torch.uint8), "SFB": torch.zeros(n, k // 16, dtype=torch.uint8),
             "C": torch.zeros(m, n, dtype=torch.float16)} for m in ms]


def _member(args, twin, groups, name, fmt="<i"):
    layout, _ = twin.layout(groups)
    offset, size = layout[name]
    width = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, args, offset + width * i)[0] for i in range(size // width)]


def test_the_per_call_host_of_v1_encodes_every_map_and_launches_a_3d_grid():
    twin = peer_cuda.TWINS["gau-nernst v1"]
    groups = _groups([200, 76, 300], 256, 512)
    host, driver = peer_cuda.Host(twin), _FakeDriver()
    first = host.call(driver, None, twin.row(3, 256, 512), groups)
    assert first["grid"] == (256 // 128, 3, 3) and first["block"] == (192, 1, 1) and first["order"] == [0, 1, 2]
    assert len(driver.encodes) == 6  # A and B of each group
    a_encode = driver.encodes[0]  # (data type, rank, address, dims, strides, box, ...)
    assert a_encode[:6] == (13, 3, groups[0]["A"].data_ptr(), (256, 200, 2), (256, 128), (256, 128, 1))
    assert _member(first["args"], twin, 3, "M_list") == [200, 76, 300]
    assert _member(first["args"], twin, 3, "K_list") == [512] * 3
    assert _member(first["args"], twin, 3, "SFB_ptr_list", "<Q")[1] == groups[1]["SFB"].data_ptr()
    assert len(driver.launches[0][3]) == 1  # the struct alone: v1's kernel takes no K
    host.call(driver, None, twin.row(3, 256, 512), groups)
    assert len(driver.encodes) == 12  # encoded again at the next call


def test_the_template_host_of_v2e_sorts_and_patches():
    twin = peer_cuda.TWINS["gau-nernst v2e"]
    groups = _groups([76, 300, 200], 512, 512)
    host, driver = peer_cuda.Host(twin), _FakeDriver()
    row = twin.row(3, 512, 512, {"BLOCK_N": 256, "raster": "Raster::M"})
    launched = host.call(driver, None, row, groups)
    assert launched["order"] == [1, 2, 0]
    assert len(driver.encodes) == 6 and all(e[2] == 0 for e in driver.encodes)  # the template: null addresses
    assert driver.encodes[1][5] == (256, 256, 1)  # B's box: BLOCK_N rows of 128 bytes, one 256-wide K block
    assert _member(launched["args"], twin, 3, "M_list") == [300, 200, 76]
    assert _member(launched["args"], twin, 3, "grid_cu") == [0, 3 * 2, 3 * 2 + 2 * 2, 3 * 2 + 2 * 2 + 1 * 2]
    a_maps = _member(launched["args"], twin, 3, "A_tmap_list", "<Q")
    assert a_maps[0] == groups[1]["A"].data_ptr() and a_maps[16] == groups[2]["A"].data_ptr()
    assert _member(launched["args"], twin, 3, "A_tmap_list")[9] == 300 - 1  # A's rows - 1 (int 9)
    assert launched["grid"] == (12, 1, 1) and driver.launches[0][3][1] == struct.pack("<i", 512)
    host.call(driver, None, row, groups)
    assert len(driver.encodes) == 6  # static: encoded once


def test_the_grids_of_v5c_and_v2d():
    """v5c launches a CTA per tile (cluster launch control takes the rest); v2d rounds each group's M tiles up
    to a multiple of CTA_GROUP."""
    groups = _groups([200, 76], 256, 512)
    v5c = peer_cuda.TWINS["gau-nernst v5c"]
    launched = peer_cuda.Host(v5c).call(_FakeDriver(), None, v5c.row(2, 256, 512), groups)
    assert launched["grid"] == ((2 + 1) * 2, 1, 1) and launched["block"] == (224, 1, 1)
    v2d = peer_cuda.TWINS["gau-nernst v2d"]
    driver = _FakeDriver()
    launched = peer_cuda.Host(v2d).call(driver, None, v2d.row(2, 256, 512, {"CTA_GROUP": 2, "NUM_BLOCKS": 148}),
                                        groups)
    assert _member(launched["args"], v2d, 2, "grid_cu") == [0, 2 * 2, 2 * 2 + 2 * 2]
    assert launched["grid"] == (8, 1, 1)
    sfa = driver.encodes[2]  # SFA: 1-D over 8-byte elements, M padded to 128
    assert sfa[:6] == (5, 1, groups[0]["SFA"].data_ptr(), (256 * 512 // 16 // 8,), (), (2048 // 8,))


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


VERSIONS = ["v1", "v2", "v2d", "v2e", "v5", "v5c", "v5e", "v5g", "v6", "v6b"]


@pytest.mark.parametrize("version", VERSIONS)
def test_twin_matches_the_real_source(version):
    """Each file is borne out by its own twin alone (every fact, the Python's included)."""
    text = _peer(f"gau-nernst/submission_{version}.py").read_text()
    src = peer_cuda.inline_source(text)
    assert src is not None
    assert peer_cuda.identify(src.cuda, text)[0] == f"gau-nernst {version}"
    assert [n for n, t in peer_cuda.TWINS.items() if not t.check(src.cuda, text)] == [f"gau-nernst {version}"]


def _emulate_peer(path, spec, *extra):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "emulate.py"), "peer", "--source", str(path),
                           "--spec", spec, *extra], capture_output=True, text=True, timeout=900)


SMALL = "m: [200, 76]; n: [256, 256]; k: [512, 512]; g: 2; seed: 1111"


@pytest.mark.parametrize("version, spec, row", [
    ("v1", SMALL, None), ("v1", "m: [200, 76, 64]; n: [256, 384, 128]; k: [512, 256, 768]; g: 3; seed: 1111", None),
    ("v2", SMALL, None), ("v2d", SMALL, None), ("v2d", SMALL, "CTA_GROUP=2,NUM_BLOCKS=148"), ("v2e", SMALL, None),
    ("v2e", SMALL.replace("256, 256", "512, 512"), "BLOCK_N=256,raster=Raster::M"), ("v5", SMALL, None),
    ("v5", SMALL, "CTA_GROUP=1"), ("v5c", SMALL, None), ("v5e", SMALL, None), ("v5g", SMALL, None), ("v6", SMALL, None),
    ("v6b", SMALL, "128,2"), ("v6b", SMALL, "256,2")])
def test_each_version_passes_a_small_spec(version, spec, row):
    """Eager, races detected (tools/emulate.py peer's default); v1 also on groups of mixed N and K, which its
    kernel takes (the later versions send them to torch._scaled_mm)."""
    path = _peer(f"gau-nernst/submission_{version}.py")
    _toolkit()
    done = _emulate_peer(path, spec, *(("--row", row) if row else ()))
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
        f"twin = dataclasses.replace(peer_cuda.TWINS['gau-nernst v6b'], **{twin})\n"
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
    ("dict(patches={'A_tmap_list': {8: 'M - 1'}, 'SFA_tmap_list': {8: '(cdiv(M, 128) * 128 * K / 16) - 1'}})",
     "FAIL"),
    # A's box of 32 rows instead of 64: the TMA unit delivers fewer bytes than the expect-tx count
    (("dict(maps=(peer_cuda.MapInit('A_tmap_list', 'init_AB_tmap', 'nullptr', ('1', 'K', '64 / CTA_GROUP', "
      "'BLOCK_K')),) + peer_cuda.TWINS['gau-nernst v6b'].maps[1:])"), "HANG"),
])
def test_a_planted_twin_defect_in_v6b_is_caught(planted, verdict):
    _toolkit()
    assert _planted_case(planted, "m: [200, 76]; n: [256, 256]; k: [512, 512]; g: 2; seed: 1111") == verdict
