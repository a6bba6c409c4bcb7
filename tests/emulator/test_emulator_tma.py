"""Tests of emulator/tma.py: the tensor map's bit layout, box loads and stores.

The layout is derived, not documented: the DSL's host code encodes each map itself. `python
tests/emulator/test_emulator_tma.py derive` reruns the derivation: it compiles every VARIANTS entry with the installed
DSL, launches it through the stub driver (../shared/emulator-probe, or STUB_DIR=<dir with libcuda.so.1 and
libcuda_dialect_runtime.so>) and prints the maps the host code wrote; DSL_VECTORS below is that output, the
same under nvidia-cutlass-dsl 4.3.5 and 4.5.2. DRIVER_VECTORS were written by a real driver's
cuTensorMapEncodeTiled (CUDA 13.0 driver on an H100) for the fields the DSL never varies, and HARDWARE_CASES
hold what an H100's TMA unit did with maps like these (shared-memory images, global writes, faults)."""
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ != "__main__":  # the capture child (`... capture`) imports the DSL only
    from emulator import tma
    from emulator.errors import EmulatorError


# ---- the derivation: compile variants with the DSL, capture the maps its host code encodes ----
# Each variant: a tensor (dtype, shape, stride in elements) at address DSL_ADDRESS, an smem layout atom
# (a tcgen05.SmemLayoutAtomKind name, or (bits, base, shift) of a raw swizzle on an 8 x 128 K-major atom)
# tiled to `smem`, which is also the CTA tiler, and the TMA op (default: a plain load).
DSL_ADDRESS = 0x7F0000001000
VARIANTS = {
    "u8_none": dict(dtype="Uint8", shape=(50, 1000), stride=(1008, 1), atom="K_INTER", smem=(16, 16)),
    "u8_sw32": dict(dtype="Uint8", shape=(50, 1000), stride=(1008, 1), atom="K_SW32", smem=(16, 32)),
    "u8_sw64": dict(dtype="Uint8", shape=(50, 1000), stride=(1008, 1), atom="K_SW64", smem=(16, 64)),
    "u8_sw128": dict(dtype="Uint8", shape=(50, 1000), stride=(1008, 1), atom="K_SW128", smem=(16, 128)),
    "fp4_sw128": dict(dtype="Float4E2M1FN", shape=(64, 1024), stride=(1024, 1), atom="K_SW128", smem=(8, 256)),
    "fp8e4m3_sw128": dict(dtype="Float8E4M3FN", shape=(64, 512), stride=(512, 1), atom="K_SW128", smem=(8, 128)),
    "fp8_as_int16": dict(dtype="Float8E4M3FN", shape=(64, 512), stride=(512, 1), atom="K_INTER", smem=(8, 16),
                         internal="Int16"),
    "f16_sw128": dict(dtype="Float16", shape=(100, 256), stride=(256, 1), atom="K_SW128", smem=(8, 64)),
    "bf16_sw128": dict(dtype="BFloat16", shape=(64, 256), stride=(256, 1), atom="K_SW128", smem=(8, 64)),
    "i16_sw128": dict(dtype="Int16", shape=(64, 256), stride=(256, 1), atom="K_SW128", smem=(8, 64)),
    "f32_sw128": dict(dtype="Float32", shape=(64, 128), stride=(128, 1), atom="K_SW128", smem=(8, 32)),
    "i32_sw128": dict(dtype="Int32", shape=(64, 128), stride=(128, 1), atom="K_SW128", smem=(8, 32)),
    "tf32_sw128": dict(dtype="TFloat32", shape=(64, 128), stride=(128, 1), atom="K_SW128", smem=(8, 32)),
    "f64_sw128": dict(dtype="Float64", shape=(64, 64), stride=(64, 1), atom="K_SW128", smem=(8, 16)),
    "i64_sw128": dict(dtype="Int64", shape=(64, 64), stride=(64, 1), atom="K_SW128", smem=(8, 16)),
    "f16_mn_sw128": dict(dtype="Float16", shape=(512, 40), stride=(1, 512), atom="MN_SW128", smem=(64, 8)),
    "f16_mn_sw128_32b": dict(dtype="Float16", shape=(512, 40), stride=(1, 512), atom="MN_SW128_32B", smem=(64, 8)),
    "u8_swizzle_1_6_1": dict(dtype="Uint8", shape=(64, 1024), stride=(1024, 1), atom=(1, 6, 1), smem=(8, 128)),
    "f16_rank3": dict(dtype="Float16", shape=(24, 64, 3), stride=(80, 1, 1936), atom="K_SW128", smem=(8, 64, 2)),
    "f16_rank4": dict(dtype="Float16", shape=(24, 64, 3, 5), stride=(80, 1, 1936, 5840), atom="K_SW128",
                      smem=(8, 64, 2, 3)),
    "f16_rank5": dict(dtype="Float16", shape=(24, 64, 3, 5, 7), stride=(80, 1, 1936, 5840, 29248), atom="K_SW128",
                      smem=(8, 64, 2, 3, 4)),
    "f16_load_2cta": dict(dtype="Float16", shape=(100, 256), stride=(256, 1), atom="K_SW128", smem=(8, 64),
                          op="load2sm"),
    "f16_multicast2": dict(dtype="Float16", shape=(100, 256), stride=(256, 1), atom="K_SW128", smem=(8, 64),
                           op="multicast", multicast=2),
    "f16_store": dict(dtype="Float16", shape=(100, 256), stride=(256, 1), atom="K_SW128", smem=(8, 64), op="store"),
    "u8_box256": dict(dtype="Uint8", shape=(1000, 1000), stride=(1008, 1), atom="K_INTER", smem=(256, 16)),
    "f16_big_dims": dict(dtype="Float16", shape=(70001, 300000), stride=(300032, 1), atom="K_SW128", smem=(8, 64)),
    "f16_big_stride": dict(dtype="Float16", shape=(5, 64), stride=(2**36 + 8, 1), atom="K_SW128", smem=(8, 64)),
    "u8_span_below_128k": dict(dtype="Uint8", shape=(128, 1008), stride=(1024, 1), atom="K_INTER", smem=(8, 16)),
    "u8_span_128k": dict(dtype="Uint8", shape=(128, 1024), stride=(1024, 1), atom="K_INTER", smem=(8, 16)),
}
LIVE_VARIANTS = ("u8_none", "u8_sw32", "u8_sw64", "fp4_sw128", "f16_sw128", "f16_mn_sw128_32b", "f16_rank5",
                 "f16_multicast2", "f16_store", "fp8_as_int16", "u8_span_128k")


def _capture(names, dump_dir):
    """In a process whose libcuda is the stub driver: compile each variant, launch it, and return the map
    its host code put in the parameter buffer (the stub's dump of the launch)."""
    import glob

    import cuda.bindings.runtime as cudart

    cudart.cudaGetDeviceCount = lambda: (cudart.cudaError_t.cudaSuccess, 1)  # the stub has no export tables
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.nvgpu import cpasync, tcgen05

    @cute.kernel
    def kernel(atom: cute.CopyAtom, tensor: cute.Tensor):
        pass

    @cute.jit
    def host(address: cutlass.Int64, dtype: cutlass.Constexpr, shape: cutlass.Constexpr, stride: cutlass.Constexpr,
             atom_kind: cutlass.Constexpr, smem: cutlass.Constexpr, op: cutlass.Constexpr,
             internal: cutlass.Constexpr, multicast: cutlass.Constexpr):
        ptr = cute.make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=16)
        tensor = cute.make_tensor(ptr, cute.make_layout(shape, stride=stride))
        if cutlass.const_expr(isinstance(atom_kind, tuple)):
            atom_layout = cute.make_composed_layout(cute.make_swizzle(*atom_kind), 0,
                                                    cute.make_layout((8, 128), stride=(128, 1)))
        else:
            atom_layout = tcgen05.make_smem_layout_atom(getattr(tcgen05.SmemLayoutAtomKind, atom_kind), dtype)
        layout = cute.tile_to_shape(atom_layout, smem, tuple(range(len(smem))))
        if cutlass.const_expr(op == "load"):
            copy_op = cpasync.CopyBulkTensorTileG2SOp()
        elif cutlass.const_expr(op == "load2sm"):
            copy_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.TWO)
        elif cutlass.const_expr(op == "multicast"):
            copy_op = cpasync.CopyBulkTensorTileG2SMulticastOp()
        else:
            copy_op = cpasync.CopyBulkTensorTileS2GOp()
        if cutlass.const_expr(internal is None):
            made = cpasync.make_tiled_tma_atom(copy_op, tensor, layout, smem, num_multicast=multicast)
        else:
            made = cpasync.make_tiled_tma_atom(copy_op, tensor, layout, smem, num_multicast=multicast,
                                               internal_type=internal)
        atom, tma_tensor = made[0], made[1]
        kernel(atom, tma_tensor).launch(grid=[1, 1, 1], block=[32, 1, 1])

    words = {}
    for name in names:
        v = VARIANTS[name]
        for f in glob.glob(os.path.join(dump_dir, "launch_*")):
            os.remove(f)
        internal = getattr(cutlass, v["internal"]) if "internal" in v else None
        host(DSL_ADDRESS, getattr(cutlass, v["dtype"]), v["shape"], v["stride"], v["atom"], v["smem"],
             v.get("op", "load"), internal, v.get("multicast", 1))
        (launch,) = glob.glob(os.path.join(dump_dir, "launch_*.txt"))
        params = [line.split() for line in open(launch) if line.startswith("param ")]
        (descriptor,) = [p[6] for p in params if p[5] == "128"]
        words[name] = " ".join(f"{w:016x}" for w in struct.unpack("<16Q", bytes.fromhex(descriptor)))
    return words


# ---- maps the DSL's host code encodes (4.3.5 and 4.5.2 alike) ----

DSL_VECTORS = {  # words 0-7; the DSL writes zeros (4.3.5) or leaves garbage (4.5.2) in words 8-15
    "u8_none":
        "00007f0000001000 0000003f00040012 0000000000000000 0000000000000000 "
        "00000031000003e7 0000000000000000 0f00000000000000 000000000000000f",
    "u8_sw32":
        "00007f0000001000 0000003f00042012 0000000000000000 0000000000000000 "
        "00000031000003e7 0000000000000000 1f00000000000000 000000000000000f",
    "u8_sw64":
        "00007f0000001000 0000003f00044012 0000000000000000 0000000000000000 "
        "00000031000003e7 0000000000000000 3f00000000000000 000000000000000f",
    "u8_sw128":
        "00007f0000001000 0000003f00046012 0000000000000000 0000000000000000 "
        "00000031000003e7 0000000000000000 7f00000000000000 000000000000000f",
    "fp4_sw128":
        "00007f0000001000 0000002000046592 0000000000000000 0000000000000000 "
        "0000003f000003ff 0000000000000000 ff00000000000000 0000000000000007",
    "fp8e4m3_sw128":
        "00007f0000001000 0000002000046012 0000000000000000 0000000000000000 "
        "0000003f000001ff 0000000000000000 7f00000000000000 0000000000000007",
    "fp8_as_int16":
        "00007f0000001000 0000002000040092 0000000000000000 0000000000000000 "
        "0000003f000000ff 0000000000000000 0700000000000000 0000000000000007",
    "f16_sw128":
        "00007f0000001000 0000002000046312 0000000000000000 0000000000000000 "
        "00000063000000ff 0000000000000000 3f00000000000000 0000000000000007",
    "bf16_sw128":
        "00007f0000001000 0000002000046512 0000000000000000 0000000000000000 "
        "0000003f000000ff 0000000000000000 3f00000000000000 0000000000000007",
    "i16_sw128":
        "00007f0000001000 0000002000046092 0000000000000000 0000000000000000 "
        "0000003f000000ff 0000000000000000 3f00000000000000 0000000000000007",
    "f32_sw128":
        "00007f0000001000 0000002000046392 0000000000000000 0000000000000000 "
        "0000003f0000007f 0000000000000000 1f00000000000000 0000000000000007",
    "i32_sw128":
        "00007f0000001000 0000002000046112 0000000000000000 0000000000000000 "
        "0000003f0000007f 0000000000000000 1f00000000000000 0000000000000007",
    "tf32_sw128":
        "00007f0000001000 0000002000056392 0000000000000000 0000000000000000 "
        "0000003f0000007f 0000000000000000 1f00000000000000 0000000000000007",
    "f64_sw128":
        "00007f0000001000 0000002000046492 0000000000000000 0000000000000000 "
        "0000003f0000003f 0000000000000000 0f00000000000000 0000000000000007",
    "i64_sw128":
        "00007f0000001000 0000002000046212 0000000000000000 0000000000000000 "
        "0000003f0000003f 0000000000000000 0f00000000000000 0000000000000007",
    "f16_mn_sw128":
        "00007f0000001000 0000004000046312 0000000000000000 0000000000000000 "
        "00000027000001ff 0000000000000000 3f00000000000000 0000000000000007",
    "f16_mn_sw128_32b":
        "00007f0000001000 00000040000c6312 0000000000000000 0000000000000000 "
        "00000027000001ff 0000000000000000 3f00000000000000 0000000000000007",
    "u8_swizzle_1_6_1":
        "00007f0000001000 00000040001c6012 0000000000000000 0000000000000000 "
        "0000003f000003ff 0000000000000000 7f00000000000000 0000000000000007",
    "f16_rank3":
        "00007f0000001000 0000000a00046322 00000000000000f2 0000000000000000 "
        "000000170000003f 0000000000000002 3f00000000000000 0000000000000107",
    "f16_rank4":
        "00007f0000001000 0000000a00046332 000002da000000f2 0000000000000000 "
        "000000170000003f 0000000400000002 3f00000000000000 0000000000020107",
    "f16_rank5":
        "00007f0000001000 0000000a00246342 000002da000000f2 0000000000000e48 "
        "000000170000003f 0000000400000002 3f00000000000006 0000000003020107",
    "f16_load_2cta":
        "00007f0000001000 0000002000046312 0000000000000000 0000000000000000 "
        "00000063000000ff 0000000000000000 3f00000000000000 0000000000000007",
    "f16_multicast2":
        "00007f0000001000 0000002000046312 0000000000000000 0000000000000000 "
        "00000063000000ff 0000000000000000 3f00000000000000 0000000000000003",
    "f16_store":
        "00007f0000001000 0000002000046312 0000000000000000 0000000000000000 "
        "00000063000000ff 0000000000000000 3f00000000000000 0000000000000007",
    "u8_box256":
        "00007f0000001000 0000003f00240012 0000000000000000 0000000000000000 "
        "000003e7000003e7 0000000000000000 0f00000000000000 00000000000000ff",
    "f16_big_dims":
        "00007f0000001000 0000928000246312 0000000000000000 0000000000000000 "
        "00011170000493df 0000000000000000 3f00000000000000 0000000000000007",
    "f16_big_stride":
        "00007f0000001000 0000000100246312 0000000000000000 0000000200000000 "
        "000000040000003f 0000000000000000 3f00000000000000 0000000000000007",
    "u8_span_below_128k":
        "00007f0000001000 0000004000040012 0000000000000000 0000000000000000 "
        "0000007f000003ef 0000000000000000 0f00000000000000 0000000000000007",
    "u8_span_128k":
        "00007f0000001000 0000004000240012 0000000000000000 0000000000000000 "
        "0000007f000003ff 0000000000000000 0f00000000000000 0000000000000007",
}


_FORMAT_OF_DTYPE = {"Uint8": "U8", "Float8E4M3FN": "U8", "Int16": "U16", "Float16": "F16", "BFloat16": "BF16",
                    "Int32": "U32", "Float32": "F32", "TFloat32": "F32", "Float64": "F64", "Int64": "U64",
                    "Float4E2M1FN": "B4X16"}
_BITS_OF_FORMAT = {"U8": 8, "U16": 16, "F16": 16, "BF16": 16, "U32": 32, "F32": 32, "F64": 64, "U64": 64, "B4X16": 4}
_SWIZZLE_OF_ATOM = {"K_INTER": ("NONE", "B16"), "K_SW32": ("B32", "B16"), "K_SW64": ("B64", "B16"),
                    "K_SW128": ("B128", "B16"), "MN_SW128": ("B128", "B16"), "MN_SW128_32B": ("B128", "B32"),
                    (1, 6, 1): ("B128", "B64")}


def _expected_fields(v):
    """What the map of a VARIANTS entry must say, from the variant alone: modes ordered by stride (the
    contiguous one first), byte strides, the smem tile as the box (a multicast load's box is the CTA's share
    of the outermost mode), the swizzle of the smem atom."""
    data_bits = _BITS_OF_FORMAT[_FORMAT_OF_DTYPE[v["dtype"]]]
    fmt = "U16" if v.get("internal") == "Int16" else _FORMAT_OF_DTYPE[v["dtype"]]
    bits = _BITS_OF_FORMAT[fmt]  # an internal type re-counts the contiguous mode in its own elements
    order = sorted(range(len(v["shape"])), key=lambda i: v["stride"][i])
    dims = [v["shape"][i] for i in order]
    dims[0] = dims[0] * data_bits // bits
    strides = tuple(v["stride"][i] * data_bits // 8 for i in order[1:])
    box = [v["smem"][i] for i in order]
    box[0] = box[0] * data_bits // bits
    box[-1] //= v.get("multicast", 1)
    dims = tuple(dims)
    swizzle, atomicity = _SWIZZLE_OF_ATOM[v["atom"]]
    extent = (dims[-1] - 1) * strides[-1] + dims[0] * bits // 8
    return dict(element_format=tma.ElementFormat[fmt], round_to_tf32=v["dtype"] == "TFloat32", rank=len(dims),
                dims=dims, strides=strides, box=tuple(box), element_strides=(1,) * len(dims),
                swizzle=tma.Swizzle[swizzle], swizzle_atomicity=tma.SwizzleAtomicity[atomicity],
                interleave=tma.Interleave.NONE, l2_promotion=tma.L2Promotion.B128, oob_fill=tma.OobFill.ZERO,
                im2col=False, dsl_bit1=True, dsl_large_tensor=extent >= 128 * 1024,
                global_address=DSL_ADDRESS, unknown_bits=(0,) * 8)


def _words(hex_words):
    words = [int(w, 16) for w in hex_words.split()]
    return struct.pack("<16Q", *(words + [0] * (16 - len(words))))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_decode_dsl_vectors(name):
    """Every field of every captured map, against what the variant that produced it asked for."""
    decoded = tma.decode_tensor_map(_words(DSL_VECTORS[name]))
    for field, value in _expected_fields(VARIANTS[name]).items():
        assert getattr(decoded, field) == value, (name, field)


def test_dsl_garbage_past_word_7_is_ignored():
    """DSL 4.5.2 leaves words 8-15 uninitialized (they held stack addresses): the decoder reads words 0-7 only."""
    raw = bytearray(_words(DSL_VECTORS["f16_sw128"]))
    clean = tma.decode_tensor_map(bytes(raw))
    raw[64:] = bytes.fromhex("a0e3964cfc7f0000" + "00" * 8 + "9ce3964cfc7f0000" * 2 + "60e07833457f0000" * 4)
    assert tma.decode_tensor_map(bytes(raw)).describe() == clean.describe()
    assert tma.decode_tensor_map(bytes(raw)).unknown_bits == (0,) * 8


def test_dsl_still_encodes_the_vectors():
    """Recompile a few variants with the installed DSL: its host code must still write these maps (this is
    the derivation itself; it needs the stub driver, see the module docstring)."""
    if _stub_dir() is None:
        pytest.skip("no stub driver (STUB_DIR or ../shared/emulator-probe with gcc)")
    found = _run_capture(LIVE_VARIANTS)
    for name in LIVE_VARIANTS:
        assert " ".join(found[name].split()[:8]) == DSL_VECTORS[name], name


# ---- maps a real driver encoded (cuTensorMapEncodeTiled / Im2col, CUDA 13.0 driver, H100) ----

DRIVER_VECTORS = {  # words 0-9 (the driver's bookkeeping in words 8-9 is ignored)
    "f16_sw128": ("00007f0000001000 0000002000046310 0000000000000000 0000000000000000 00000063000000ff "
                  "0000000000000000 3f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "s32": ("00007f0000001000 0000002000046190 0000000000000000 0000000000000000 000000630000007f "
            "0000000000000000 1f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "s64": ("00007f0000001000 0000002000046290 0000000000000000 0000000000000000 000000630000003f "
            "0000000000000000 0f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "f32_ftz": ("00007f0000001000 0000002000046410 0000000000000000 0000000000000000 000000630000007f "
                "0000000000000000 1f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "tf32": ("00007f0000001000 0000002000056390 0000000000000000 0000000000000000 000000630000007f "
             "0000000000000000 1f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "tf32_ftz": ("00007f0000001000 0000002000056410 0000000000000000 0000000000000000 000000630000007f "
                 "0000000000000000 1f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "l2_none": ("00007f0000001000 0000002000006310 0000000000000000 0000000000000000 00000063000000ff "
                "0000000000000000 3f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "l2_64": ("00007f0000001000 0000002000026310 0000000000000000 0000000000000000 00000063000000ff "
              "0000000000000000 3f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "l2_256": ("00007f0000001000 0000002000066310 0000000000000000 0000000000000000 00000063000000ff "
               "0000000000000000 3f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "oob_nan": ("00007f0000001000 000000200004e310 0000000000000000 0000000000000000 00000063000000ff "
                "0000000000000000 3f00000000000000 0000000000000007 0000000000000400 0000000000000400"),
    "interleave16": ("00007f0000001000 0000002000040b20 0000000000000c80 0000000000000000 0000006300000007 "
                     "0000000000000002 0700000000000000 0000000000000107 0000000000000100 0000000000000010"),
    "interleave32": ("00007f0000001000 0000002000043320 0000000000000c80 0000000000000000 000000630000000f "
                     "0000000000000002 0f00000000000000 0000000000000107 0000000000000200 0000000000000100"),
    "estrides_4_5": ("00007f0000001000 0000002000046310 0000000000000000 0000000000000000 00000063000000ff "
                     "0000000000000000 3f00002300000000 0000000000000007 0000000000000020 0000000000000400"),
    "estrides_r5": ("00007f0000001000 0000002000046340 0000258000000c80 000000000000bb80 00000063000000ff "
                    "0000000400000002 3f0058d100000006 0000000003020107 0000000000000000 0000000000000400"),
    "big_strides_r5": ("00007f0000001000 0000000100040340 0000000300000002 0000862100000004 000000020000003f "
                       "0000000200000002 3f00000000000002 0000000000000000 0000000000000080 0000000000000010"),
    "im2col": ("00007f0000001000 0000000800046321 0000000000000100 0000000000000000 0000001f0000003f "
               "0000000000000003 3f00000000000000 0000000f0001ffff 0000000000000800 0000000000000400"),
}
def _driver_expected(name):
    """What was passed to the driver for each DRIVER_VECTORS entry, in the decoder's terms."""
    f16 = dict(element_format=tma.ElementFormat.F16, rank=2, dims=(256, 100), strides=(512,), box=(64, 8),
               element_strides=(1, 1), swizzle=tma.Swizzle.B128, interleave=tma.Interleave.NONE,
               l2_promotion=tma.L2Promotion.B128, oob_fill=tma.OobFill.ZERO, round_to_tf32=False, im2col=False,
               dsl_bit1=False, dsl_large_tensor=False)
    f32 = dict(f16, dims=(128, 100), box=(32, 8))
    rank3 = dict(f16, rank=3, strides=(512, 51200), element_strides=(1, 1, 1))
    rank5 = dict(f16, rank=5, dims=(256, 100, 3, 5, 7), strides=(512, 51200, 153600, 768000), box=(64, 8, 2, 3, 4))
    return {
        "f16_sw128": f16,
        "s32": dict(f32, element_format=tma.ElementFormat.S32),
        "s64": dict(f16, element_format=tma.ElementFormat.S64, dims=(64, 100), box=(16, 8)),
        "f32_ftz": dict(f32, element_format=tma.ElementFormat.F32_FTZ),
        "tf32": dict(f32, element_format=tma.ElementFormat.F32, round_to_tf32=True),
        "tf32_ftz": dict(f32, element_format=tma.ElementFormat.F32_FTZ, round_to_tf32=True),
        "l2_none": dict(f16, l2_promotion=tma.L2Promotion.NONE),
        "l2_64": dict(f16, l2_promotion=tma.L2Promotion.B64),
        "l2_256": dict(f16, l2_promotion=tma.L2Promotion.B256),
        "oob_nan": dict(f16, oob_fill=tma.OobFill.NAN),
        "interleave16": dict(rank3, dims=(8, 100, 3), box=(8, 8, 2), interleave=tma.Interleave.B16,
                             swizzle=tma.Swizzle.NONE),
        "interleave32": dict(rank3, dims=(16, 100, 3), box=(16, 8, 2), interleave=tma.Interleave.B32,
                             swizzle=tma.Swizzle.B32),
        "estrides_4_5": dict(f16, element_strides=(4, 5)),
        "estrides_r5": dict(rank5, element_strides=(2, 3, 4, 5, 6)),
        "big_strides_r5": dict(rank5, dims=(64, 3, 3, 3, 3), swizzle=tma.Swizzle.NONE, box=(64, 1, 1, 1, 1),
                               strides=(2**36 + 16, 2**37 + 32, 3 * 2**37 + 48, 2**39 + 64), element_strides=(1,) * 5),
        "im2col": dict(im2col=True, rank=3, element_format=tma.ElementFormat.F16, swizzle=tma.Swizzle.B128),
    }[name]


@pytest.mark.parametrize("name", sorted(DRIVER_VECTORS))
def test_decode_driver_vectors(name):
    decoded = tma.decode_tensor_map(_words(DRIVER_VECTORS[name]))
    assert decoded.global_address == DSL_ADDRESS
    for field, value in _driver_expected(name).items():
        assert getattr(decoded, field) == value, (name, field)
    assert name == "im2col" or decoded.unknown_bits == (0,) * 8


# ---- a test-side encoder (the table in emulator/tma.py, written the other way round) ----

def _encode_map(fmt="U8", dims=(64, 64), strides=(64,), box=(16, 8), element_strides=None, swizzle="NONE",
                atomicity="B16", oob="ZERO", address=0x10000, extra_word1=0):
    rank = len(dims)
    element_strides = element_strides or (1,) * rank
    w = [0] * 16
    w[0] = address
    w[1] = ((rank - 1) << 4 | tma.ElementFormat[fmt] << 7 | tma.Swizzle[swizzle] << 13 | tma.OobFill[oob] << 15
            | 2 << 17 | tma.SwizzleAtomicity[atomicity] << 19 | extra_word1)
    s = [x >> 4 for x in strides] + [0] * (4 - len(strides))
    w[1] |= (s[0] & 0xFFFFFFFF) << 32
    w[2] = (s[1] & 0xFFFFFFFF) | (s[2] & 0xFFFFFFFF) << 32
    w[3] = (s[3] & 0xFFFFFFFF) | sum((x >> 32) << (32 + 4 * i) for i, x in enumerate(s))
    d = [x - 1 for x in dims] + [0] * (5 - rank)
    w[4], w[5], w[6] = d[0] | d[1] << 32, d[2] | d[3] << 32, d[4]
    w[6] |= sum((e - 1) << (32 + 3 * i) for i, e in enumerate(element_strides)) | (box[0] - 1) << 56
    w[7] = sum((b - 1) << (8 * i) for i, b in enumerate(box[1:]))
    return tma.decode_tensor_map(struct.pack("<16Q", *w))


def test_encoder_reproduces_driver_words():
    """The test-side encoder writes what the driver wrote (words 0-7), so the maps built below are real ones."""
    for name, kw in [("f16_sw128", dict(fmt="F16", dims=(256, 100), strides=(512,), box=(64, 8), swizzle="B128")),
                     ("estrides_r5", dict(fmt="F16", dims=(256, 100, 3, 5, 7), strides=(512, 51200, 153600, 768000),
                                          box=(64, 8, 2, 3, 4), element_strides=(2, 3, 4, 5, 6), swizzle="B128")),
                     ("oob_nan", dict(fmt="F16", dims=(256, 100), strides=(512,), box=(64, 8), swizzle="B128",
                                      oob="NAN"))]:
        encoded = _encode_map(address=DSL_ADDRESS, **kw).raw[:64]
        assert encoded == _words(DRIVER_VECTORS[name])[:64], name


# ---- what an H100's TMA unit did (cp.async.bulk.tensor on maps from cuTensorMapEncodeTiled) ----
# Global memory held 16-bit words counting up from 0 (byte i of the tensor = (i // 2 >> 8 * (i % 2)) & 255);
# stores copied bytes (7 i + 3) mod 251 into shared memory and wrote over 0xCD. Each case: name, op, coords,
# shared-memory offset (from a 1024-aligned base), tensor bytes, the map's words 0-7 (or the map's fields
# where the hardware faulted before the map was kept), and the SHA-256 of the shared-memory box (load) or of
# the whole tensor afterwards (store), or "fault" (illegal instruction / misaligned address).
HARDWARE_CASES = [
    ("f16_sw128_in", "load", (64, 8), 0, 51200,
     "00007f9213e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "c0789323c76df2ae69a1e7ee2a97d06325526a99a98db4796f24b64dfab60ea1"),
    ("f16_sw128_off128", "load", (0, 0), 128, 51200,
     "00007f2477e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "6502c2c2d2f7271580de854e72206b3e1fa4943115c9563fc58a47a1021771d6"),
    ("f16_sw128_off384", "load", (8, 1), 384, 51200,
     "00007fae55e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "661864568fb9f1b9d85675bcb6a28c09e8c20c5a412300ce5fd2d1003a6b9bbd"),
    ("f16_sw128_partial_hi", "load", (160, 96), 0, 51200,
     "00007f2b7de00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "709f63d0127337f7b43e0be1886ba2055829600e5547cce48a3b99a4b79446ab"),
    ("f16_sw128_partial_lo", "load", (-8, -3), 0, 51200,
     "00007f3825e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "f76af8f6a96f4b6072973902d8c1b8cc122abfc17569584f63ce9a961cb9aa76"),
    ("f16_sw128_out_right", "load", (296, 0), 0, 51200,
     "00007f5115e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"),
    ("f16_sw128_out_left", "load", (-64, 0), 0, 51200,
     "00007fb12de00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"),
    ("f16_sw128_out_above", "load", (0, -8), 0, 51200,
     "00007f34d3e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"),
    ("f16_sw128_out_below", "load", (0, 100), 0, 51200,
     "00007f566fe00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"),
    ("f16_sw128_out_corner", "load", (-104, -50), 0, 51200,
     "00007faf43e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"),
    ("f16_sw64", "load", (40, 50), 0, 51200,
     "00007f09bfe00000 0000002000044310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 1f00000000000000 0000000000000007",
     "1396f28506c586bf8e2f2339a43595582eda08df81ec5d72dd32a26eef2e93cc"),
    ("f16_sw64_off512", "load", (-8, 95), 512, 51200,
     "00007fc4dbe00000 0000002000044310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 1f00000000000000 0000000000000007",
     "5e6a3ec828151b8427ec7e9d85414bd74d8e45d206d58c867633ad49cc1b1c8e"),
    ("f16_sw32", "load", (184, 95), 0, 51200,
     "00007fdf6be00000 0000002000042310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 0f00000000000000 0000000000000007",
     "1aa0882b6f512ab87ae12e3d37f169d9d9e0092cbdbc47c04abbaa662e7a3ba5"),
    ("f16_sw32_off256", "load", (8, 3), 256, 51200,
     "00007f3021e00000 0000002000042310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 0f00000000000000 0000000000000007",
     "f0302814e93eaecdf825457a910e069a7ef00301806c1ad0d50f0135b25ae5b2"),
    ("f16_none", "load", (152, 97), 0, 51200,
     "00007fa063e00000 0000002000040310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "71ddbda04919bd9e8a927ffd83d1247e635ff0dce30e1c3410155d6a679d0b8c"),
    ("f16_none_small", "load", (-8, 1), 128, 51200,
     "00007f4c97e00000 0000002000040310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 0700000000000000 0000000000000003",
     "f5a5fd42d16a20302798ef6ed309979b43003d2320d9f0e8ea9831a92759fb4b"),
    ("u8_sw128", "load", (880, 290), 0, 302592,
     "00007f141be00000 0000003f00046010 0000000000000000 0000000000000000 "
     "0000012b000003e7 0000000000000000 7f00000000000000 000000000000000f",
     "4770e99f3675d9e98f9d6f732c6d18e9979a1690376fb234c8531aa83fb2bb71"),
    ("u8_box256", "load", (992, 100), 0, 302592,
     "00007fe7b1e00000 0000003f00040010 0000000000000000 0000000000000000 "
     "0000012b000003e7 0000000000000000 0f00000000000000 00000000000000ff",
     "643000b69da265bb05af94d7106321fe24cdedd3756bb7f04318054573c31e68"),
    ("u8_sw32_neg", "load", (-16, -2), 0, 302592,
     "00007f9277e00000 0000003f00042010 0000000000000000 0000000000000000 "
     "0000012b000003e7 0000000000000000 1f00000000000000 0000000000000004",
     "8f812f706080173b885b9ed8608b8e0af99d56b6ea47301128dd1595b9ad5dd5"),
    ("f32_es2_1", "load", (12, 3), 0, 30720,
     "00007f09c7e00000 0000002000040390 0000000000000000 0000000000000000 "
     "0000003b00000063 0000000000000000 1f00000100000000 0000000000000007",
     "0b0ad2d7e9c11cc61bc9dea36064e2389f10f3efefb7d6cacab302de9588157a"),
    ("f32_es1_2", "load", (12, 3), 0, 30720,
     "00007fd9c3e00000 0000002000040390 0000000000000000 0000000000000000 "
     "0000003b00000063 0000000000000000 1f00000800000000 0000000000000007",
     "104d16fd02362abf16b7f252fbd3b7e790eb3520241666e5661f522f03f4aef3"),
    ("f32_es3_3", "load", (12, 3), 0, 30720,
     "00007f4087e00000 0000002000040390 0000000000000000 0000000000000000 "
     "0000003b00000063 0000000000000000 2300001200000000 0000000000000008",
     "1f39743cd9af01d8d29d7dc8e7abc33811ca9c1dd20f9535771dd91640b1c715"),
    ("f32_es2_2_oob", "load", (-4, -1), 0, 30720,
     "00007f20b3e00000 0000002000040390 0000000000000000 0000000000000000 "
     "0000003b00000063 0000000000000000 1f00000900000000 0000000000000007",
     "156d34e27b65f0ef7367466fa29bb887d897ae46595e6be8829cc40254168822"),
    ("f32_es2_2_oob_hi", "load", (84, 57), 0, 30720,
     "00007f8e07e00000 0000002000040390 0000000000000000 0000000000000000 "
     "0000003b00000063 0000000000000000 1f00000900000000 0000000000000007",
     "fe769dc7ee7ed0934b55d92d0d6aa9ecadf1db6beab197f6df117abe3145ec56"),
    ("f16_r3_sw128", "load", (0, 20, 2), 0, 11776,
     "00007f0353e00000 0000000a00046320 00000000000000f2 0000000000000000 "
     "000000170000003f 0000000000000002 3f00000000000000 0000000000000107",
     "755fc867cfe05d03625e1fa2cf8213126a47c047d83c913212d5f0b56a90e62e"),
    ("f16_r4_sw64", "load", (0, 22, -1, 3), 0, 58368,
     "00007f2187e00000 0000000a00044330 000002da000000f2 0000000000000000 "
     "000000170000003f 0000000400000002 1f00000000000000 0000000000020103",
     "ae8372ad0cff9902c0a9e2af75d221d0e26175eb864f2820f844115fb34005e3"),
    ("f16_r5", "load", (40, -2, 2, 4, -1), 0, 409344,
     "00007f66ffe00000 0000000a00040340 000002da000000f2 0000000000000e48 "
     "000000170000003f 0000000400000002 1f00000000000006 0000000001020103",
     "b8b81c7d8c868c6d1d71da67220f03a8123037c9029b8a87606ad738e22a8f40"),
    ("nan_f16", "load", (160, 96), 0, 51200,
     "00007f7423e00000 000000200004e310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "5d51ab802dd869104a81fbcfdbd141d3bde28441e7978cccc8cb8163167aa60e"),
    ("nan_bf16", "load", (-8, -3), 0, 51200,
     "00007fbc8fe00000 000000200004e510 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "f4ff3926829c7e7674e1f9ca88f820e2372973d34ad87b04482f875524977d84"),
    ("nan_f32", "load", (80, 96), 0, 51200,
     "00007f3b53e00000 000000200004e390 0000000000000000 0000000000000000 "
     "0000006300000063 0000000000000000 1f00000000000000 0000000000000007",
     "5d51ab802dd869104a81fbcfdbd141d3bde28441e7978cccc8cb8163167aa60e"),
    ("nan_f64", "load", (40, 96), 0, 51200,
     "00007f56cbe00000 000000200004e490 0000000000000000 0000000000000000 "
     "0000006300000031 0000000000000000 0f00000000000000 0000000000000007",
     "5d51ab802dd869104a81fbcfdbd141d3bde28441e7978cccc8cb8163167aa60e"),
    ("rows32_sw128", "load", (32, 16), 0, 51200,
     "00007fcb0de00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 0f00000000000000 0000000000000007",
     "not modeled"),
    ("bad_inner_coord", "load", (3, 5), 0, 51200,
     dict(fmt="F16", dims=(200, 100), strides=(512,), box=(64, 8), swizzle="B128"),
     "fault"),
    ("bad_inner_coord_u8", "load", (990, 100), 0, 302592,
     dict(fmt="U8", dims=(1000, 300), strides=(1008,), box=(16, 256)),
     "fault"),
    ("bad_smem_off64", "load", (0, 0), 64, 51200,
     dict(fmt="F16", dims=(200, 100), strides=(512,), box=(64, 8)),
     "fault"),
    ("bad_smem_off16", "load", (0, 0), 16, 51200,
     dict(fmt="F16", dims=(200, 100), strides=(512,), box=(8, 4)),
     "fault"),
    ("st_f16_sw128_in", "store", (64, 8), 128, 51200,
     "00007f0305e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "7818f99974fdd907f30418d3b7038771445b20fbd778f31a57ad9755079e7f00"),
    ("st_f16_sw128_partial", "store", (160, 96), 0, 51200,
     "00007fa71fe00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "341c42d6404fa5eb80c5dc6fcefd60d8c5ad477dd761af3fcd0fbd254f33af73"),
    ("st_f16_sw128_out_right", "store", (296, 0), 0, 51200,
     "00007f6939e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "e538dd89e654cd21616a3673442d1670d248994a8c3990e0a052f8b36cee049e"),
    ("st_f16_sw128_out_below", "store", (0, 100), 0, 51200,
     "00007f2f39e00000 0000002000046310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 3f00000000000000 0000000000000007",
     "e538dd89e654cd21616a3673442d1670d248994a8c3990e0a052f8b36cee049e"),
    ("st_u8_unit_rounding", "store", (992, 45), 0, 50432,
     "00007f4161e00000 0000003f00040010 0000000000000000 0000000000000000 "
     "00000031000003e7 0000000000000000 0f00000000000000 000000000000000f",
     "bc27187e1b7abbddd882285aa652578c9b30729ea987171f3006e1ed23ac460e"),
    ("st_f16_r3_sw64", "store", (40, 20, 2), 0, 11776,
     "00007f5fb1e00000 0000000a00044320 00000000000000f2 0000000000000000 "
     "000000170000003f 0000000000000002 1f00000000000000 0000000000000107",
     "21f8403a04989282baec15292d51f27524c79ee1952f1bdd7f71c1eca5ca6642"),
    ("st_f16_sw32", "store", (184, 95), 0, 51200,
     "00007f648fe00000 0000002000042310 0000000000000000 0000000000000000 "
     "00000063000000c7 0000000000000000 0f00000000000000 0000000000000007",
     "98c24b0c278898b739fa6615c5180583452eb47c7930aeb7ef9ded43745758ad"),
    ("st_f32_es2_1", "store", (12, 3), 0, 30720,
     "00007fdb85e00000 0000002000040390 0000000000000000 0000000000000000 "
     "0000003b00000063 0000000000000000 1f00000100000000 0000000000000007",
     "ba5c8fefdb5f8e93875772a2a4a78979a42f85a605512ed1f8b03d1925032fe0"),
    ("st_bad_negative_rows", "store", (0, -3), 0, 51200,
     dict(fmt="F16", dims=(200, 100), strides=(512,), box=(64, 8), swizzle="B128"),
     "fault"),
    ("st_bad_negative_inner", "store", (-8, 0), 0, 51200,
     dict(fmt="F16", dims=(200, 100), strides=(512,), box=(64, 8), swizzle="B128"),
     "fault"),
    ("st_bad_negative_outer", "store", (32, 20, -1), 0, 11776,
     dict(fmt="F16", dims=(64, 24, 3), strides=(160, 3872), box=(32, 8, 2), swizzle="B64"),
     "fault"),
]


@pytest.mark.parametrize("case", HARDWARE_CASES, ids=[c[0] for c in HARDWARE_CASES])
def test_matches_h100(case):
    import hashlib

    name, op, coords, smem_offset, nbytes, words, expect = case
    tmap = tma.decode_tensor_map(_words(words)) if isinstance(words, str) else _encode_map(**words)
    base = tmap.global_address
    memory = np.arange(nbytes // 2, dtype="<u2").view(np.uint8).copy()
    if expect == "not modeled":
        with pytest.raises(NotImplementedError):
            tma.load_box(tmap, coords, lambda a, n: memory[a - base:a - base + n], smem_offset)
        return
    if op == "load":
        def run():
            return tma.load_box(tmap, coords, lambda a, n: memory[a - base:a - base + n].copy(), smem_offset)[0]
    else:
        memory[:] = 0xCD
        source = ((np.arange(tma.box_bytes(tmap)) * 7 + 3) % 251).astype(np.uint8)

        def write(address, data):
            assert base <= address and address + data.size <= base + nbytes
            memory[address - base:address - base + data.size] = data

        def run():
            tma.store_box(tmap, coords, source, smem_offset, write)
            return memory
    if expect == "fault":
        with pytest.raises(EmulatorError):
            run()
    else:
        assert hashlib.sha256(run().tobytes()).hexdigest() == expect


# ---- loads, stores and swizzles, against references written element by element ----

def _tensor(dims, strides, itemsize, rng):
    """Random global memory for a map at 0x10000 and a reader that checks bounds."""
    nbytes = dims[0] * itemsize + sum((d - 1) * s for d, s in zip(dims[1:], strides))
    memory = rng.integers(0, 256, nbytes, dtype=np.uint8)
    reads = []

    def read(address, n):
        assert 0x10000 <= address and address + n <= 0x10000 + nbytes, (address, n)
        reads.append(n)
        return memory[address - 0x10000:address - 0x10000 + n].copy()

    return memory, read, reads


def _element(memory, strides, itemsize, index):
    offset = index[0] * itemsize + sum(i * s for i, s in zip(index[1:], strides))
    return memory[offset:offset + itemsize]


def test_swizzle_128b_load_matches_a_per_element_reference():
    """ISA 5.5.7: with the 128-byte swizzle, the 16-byte unit at address bits 4-6 of each 128-byte row is
    XORed with bits 7-9 of the shared-memory address; the box lands row-major before the swizzle."""
    rng = np.random.default_rng(1)
    dims, strides = (256, 100), (512,)
    memory, read, reads = _tensor(dims, strides, 2, rng)
    tmap = _encode_map("F16", dims, strides, box=(64, 8), swizzle="B128")
    smem_address = 0x2000 + 3 * 128  # not 1024-aligned: the pattern follows the address, not the box
    image, nbytes = tma.load_box(tmap, (64, 40), read, smem_address)
    assert nbytes == 64 * 8 * 2 == image.size and reads == [128] * 8
    for row in range(8):
        for col in range(64):
            address = smem_address + row * 128 + col * 2
            swizzled = address ^ (((address >> 7) & 7) << 4)
            got = image[swizzled - smem_address:swizzled - smem_address + 2]
            assert (got == _element(memory, strides, 2, (64 + col, 40 + row))).all(), (row, col)


@pytest.mark.parametrize("swizzle,bits", [("B32", (1, 4, 3)), ("B64", (2, 4, 3)), ("B128", (3, 4, 3))])
def test_swizzle_spans(swizzle, bits):
    """32 and 64 B swizzles XOR 1 and 2 bits; a box whose rows are the span lands as the pattern says."""
    b, m, s = bits
    span = 16 << b
    rng = np.random.default_rng(2)
    memory, read, _ = _tensor((256, 16), (256,), 1, rng)
    tmap = _encode_map("U8", (256, 16), (256,), box=(span, 8), swizzle=swizzle)
    image, _ = tma.load_box(tmap, (span, 3), read, 0x800)
    for row in range(8):
        for col in range(span):
            address = 0x800 + row * span + col
            address ^= (address >> s) & (((1 << b) - 1) << m)
            assert image[address - 0x800] == _element(memory, (256,), 1, (span + col, 3 + row))[0]


def test_swizzle_atomicity_32b_and_64b():
    """128 B swizzles with 32 B / 64 B atoms move 32 / 64 B units (the layouts the DSL pairs with them)."""
    rng = np.random.default_rng(3)
    memory, read, _ = _tensor((128, 8), (128,), 1, rng)
    for atomicity, (b, m, s) in [("B32", (2, 5, 2)), ("B64", (1, 6, 1))]:
        tmap = _encode_map("U8", (128, 8), (128,), box=(128, 8), swizzle="B128", atomicity=atomicity)
        image, _ = tma.load_box(tmap, (0, 0), read, 0)
        for address in range(1024):
            swizzled = address ^ ((address >> s) & (((1 << b) - 1) << m))
            assert image[swizzled] == memory[address], (atomicity, address)


@pytest.mark.parametrize("coords", [(-16, 4), (32, 4), (0, -3), (0, 16), (-16, -3), (32, 14), (48, 0), (0, 20),
                                    (-64, -8), (-16, 30)])
def test_oob_fill_at_every_edge(coords):
    """ISA 5.5.3.3: elements outside the tensor are zero-filled, partial or whole boxes alike, and the load
    still delivers the whole box's bytes."""
    rng = np.random.default_rng(4)
    dims, strides = (40, 20), (96,)
    memory, read, _ = _tensor(dims, strides, 2, rng)
    tmap = _encode_map("U16", dims, strides, box=(16, 8))
    image, nbytes = tma.load_box(tmap, coords, read, 0x400)
    assert nbytes == 16 * 8 * 2
    for row in range(8):
        for col in range(16):
            c, r = coords[0] + col, coords[1] + row
            want = _element(memory, strides, 2, (c, r)) if 0 <= c < 40 and 0 <= r < 20 else np.zeros(2, np.uint8)
            assert (image[(row * 16 + col) * 2:(row * 16 + col) * 2 + 2] == want).all(), (row, col)


def test_nan_fill_is_0x7ff7_per_half_word():
    """With OOB NaN fill, an H100 writes 0x7FF7 in every 16-bit half of an out-of-bound element."""
    rng = np.random.default_rng(5)
    memory, read, _ = _tensor((32, 8), (128,), 4, rng)
    tmap = _encode_map("F32", (32, 8), (128,), box=(8, 4), oob="NAN")
    image, _ = tma.load_box(tmap, (28, 6), read, 0)
    words = image.view("<u4").reshape(4, 8)
    assert (words[2:] == 0x7FF77FF7).all() and (words[:2, 4:] == 0x7FF77FF7).all()
    assert (image.reshape(4, 32)[:2, :16] == memory.reshape(8, 128)[6:8, 112:128]).all()


def test_store_writes_in_bounds_only():
    """ISA 5.5.3.3: a store skips out-of-bound rows; of a row crossing the end it writes the in-bounds bytes
    rounded up to 16-byte units (an H100 did: case st_u8_unit_rounding)."""
    dims, strides = (40, 20), (64,)
    memory = np.full(20 * 64, 0xCD, dtype=np.uint8)
    writes = []

    def write(address, data):
        writes.append((address - 0x10000, data.size))
        memory[address - 0x10000:address - 0x10000 + data.size] = data

    tmap = _encode_map("U8", dims, strides, box=(32, 8))
    source = np.arange(256, dtype=np.uint8)
    tma.store_box(tmap, (16, 16), source, 0x400, write)
    assert writes == [(r * 64 + 16, 32) for r in (16, 17, 18, 19)]  # 24 bytes inside -> two 16 B units
    for r in range(16, 20):
        assert (memory[r * 64 + 16:r * 64 + 48] == source[(r - 16) * 32:(r - 15) * 32]).all()
    untouched = np.ones(memory.size, bool)
    for r in range(16, 20):
        untouched[r * 64 + 16:r * 64 + 48] = False
    assert (memory[untouched] == 0xCD).all()
    writes.clear()
    tma.store_box(tmap, (48, 0), source, 0x400, write)
    tma.store_box(tmap, (0, 20), source, 0x400, write)
    assert writes == []


@pytest.mark.parametrize("swizzle,box", [("NONE", (64, 8)), ("B32", (16, 8)), ("B64", (32, 8)), ("B128", (64, 8))])
def test_swizzled_load_then_store_round_trips(swizzle, box):
    rng = np.random.default_rng(6)
    dims, strides = (200, 30), (512,)
    memory, read, _ = _tensor(dims, strides, 2, rng)
    copy = np.zeros_like(memory)

    def write(address, data):
        copy[address - 0x10000:address - 0x10000 + data.size] = data

    tmap = _encode_map("F16", dims, strides, box=box, swizzle=swizzle)
    for coords in [(0, 0), (box[0], 8), (200 - box[0], 22)]:
        image, _ = tma.load_box(tmap, coords, read, 0x1000)
        tma.store_box(tmap, coords, image, 0x1000, write)
        rows = slice(coords[1], coords[1] + 8)
        cols = slice(coords[0] * 2, (coords[0] + box[0]) * 2)
        got = np.stack([copy[r * 512:r * 512 + 400] for r in range(30)])
        ref = np.stack([memory[r * 512:r * 512 + 400] for r in range(30)])
        assert (got[rows, cols] == ref[rows, cols]).all()
    written = np.zeros(30 * 200, bool).reshape(30, 200)
    for coords in [(0, 0), (box[0], 8), (200 - box[0], 22)]:
        written[coords[1]:coords[1] + 8, coords[0]:coords[0] + box[0]] = True
    got = np.stack([copy[r * 512:r * 512 + 400] for r in range(30)]).view("<u2")
    assert (got[~written] == 0).all()


def test_traversal_strides():
    """ISA 5.5.3.2: a traversal stride s on an outer dim keeps every s-th element, ceil(box / s) of them;
    on dim 0 an H100 ignores it (case f32_es2_1)."""
    rng = np.random.default_rng(7)
    memory, read, _ = _tensor((64, 30), (256,), 4, rng)
    tmap = _encode_map("F32", (64, 30), (256,), box=(16, 9), element_strides=(2, 3))
    image, nbytes = tma.load_box(tmap, (8, 2), read, 0)
    assert nbytes == 16 * 3 * 4
    for row, r in enumerate((2, 5, 8)):
        assert (image[row * 64:(row + 1) * 64] == memory[r * 256 + 32:r * 256 + 96]).all()


def test_packed_fp4_box_counts_4_bit_elements():
    rng = np.random.default_rng(8)
    memory, read, _ = _tensor((1024, 4), (512,), 1, rng)  # 1024 4-bit elements = 512 B a row
    tmap = _encode_map("B4X16", (1024, 4), (512,), box=(256, 2))
    assert tmap.element_bits == 4 and tma.box_bytes(tmap) == 256
    image, _ = tma.load_box(tmap, (512, 1), read, 0)
    for row in range(2):
        assert (image[row * 128:(row + 1) * 128] == memory[(1 + row) * 512 + 256:(1 + row) * 512 + 384]).all()
    with pytest.raises(EmulatorError):
        tma.load_box(tmap, (16, 1), read, 0)  # 8 bytes: not at a 16-byte boundary


def test_address_and_coordinate_rules():
    rng = np.random.default_rng(9)
    _, read, _ = _tensor((64, 8), (128,), 2, rng)
    tmap = _encode_map("F16", (64, 8), (128,), box=(16, 4))
    with pytest.raises(EmulatorError, match="128-byte aligned"):
        tma.load_box(tmap, (0, 0), read, 0x440)
    with pytest.raises(EmulatorError, match="16-byte boundary"):
        tma.load_box(tmap, (4, 0), read, 0x400)
    with pytest.raises(EmulatorError, match="negative"):
        tma.store_box(tmap, (0, -1), np.zeros(128, np.uint8), 0x400, lambda a, d: None)
    with pytest.raises(EmulatorError, match="coordinates"):
        tma.load_box(tmap, (0, 0, 0), read, 0x400)


@pytest.mark.parametrize("feature,tmap", [
    ("im2col", "DRIVER:im2col"),
    ("interleave", "DRIVER:interleave32"),
    ("tf32", "DRIVER:tf32"),
    ("FTZ", "DRIVER:f32_ftz"),
    ("padded sub-byte", dict(fmt="B4X16_P64", dims=(128, 4), strides=(64,), box=(32, 2))),
    ("atomicity", dict(fmt="U8", dims=(128, 8), strides=(128,), box=(128, 8), swizzle="B128",
                       atomicity="B32_FLIP_8B")),
    ("undecoded bits", dict(fmt="U8", extra_word1=1 << 25)),
    ("shorter than the span", dict(fmt="F16", dims=(200, 100), strides=(512,), box=(16, 8), swizzle="B128")),
    ("NaN", dict(fmt="U8", oob="NAN")),
])
def test_features_not_modeled_raise(feature, tmap):
    if isinstance(tmap, str):
        tmap = tma.decode_tensor_map(_words(DRIVER_VECTORS[tmap.split(":")[1]]))
    else:
        tmap = _encode_map(**tmap)
    with pytest.raises(NotImplementedError, match=feature):
        tma.load_box(tmap, (0,) * tmap.rank, lambda a, n: np.zeros(n, np.uint8), 0)


def test_box_of_128_rows_by_256_bytes_loads_in_well_under_a_millisecond():
    memory = np.zeros(512 * 1024, np.uint8)
    tmap = _encode_map("U8", (1024, 512), (1024,), box=(256, 128))
    best = min(_timed(lambda: tma.load_box(tmap, (256, 100), lambda a, n: memory[a - 0x10000:a - 0x10000 + n], 0))
               for _ in range(20))
    assert best < 1e-3, best


def _timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _stub_dir():
    """A directory with the stub libcuda.so.1 and libcuda_dialect_runtime.so, or None."""
    if os.environ.get("STUB_DIR"):
        return os.environ["STUB_DIR"]
    build = os.path.join(ROOT, "..", "shared", "emulator-probe", "build.sh")
    if not os.path.exists(build) or not shutil.which("gcc"):
        return None
    out = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tma-test-stub")
    if not os.path.exists(os.path.join(out, "libcuda_dialect_runtime.so")):
        subprocess.run(["bash", build, out], check=True, capture_output=True)
    return out


def _run_capture(names, python=sys.executable):
    """Run the capture in a child process whose libcuda is the stub; returns {name: 16 words as hex}."""
    import json
    import tempfile

    stub = _stub_dir()
    if stub is None:
        return None
    with tempfile.TemporaryDirectory() as dump:
        env = dict(os.environ, CUTE_DSL_ARCH="sm_100a", CUTE_DSL_DISABLE_FILE_CACHING="1", CUDA_VISIBLE_DEVICES="",
                   CUTE_DSL_LIBS=os.path.join(stub, "libcuda_dialect_runtime.so"), LD_LIBRARY_PATH=stub,
                   CUSTUB_DUMP=dump)
        p = subprocess.run([python, os.path.abspath(__file__), "capture", dump, *names], env=env,
                           capture_output=True, text=True, timeout=600)
        if p.returncode:
            raise RuntimeError(p.stderr[-3000:])
        return json.loads(p.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    import json

    if sys.argv[1] == "capture":
        print(json.dumps(_capture(sys.argv[3:] or list(VARIANTS), sys.argv[2])))
    elif sys.argv[1] == "derive":
        found = _run_capture(sys.argv[2:] or list(VARIANTS))
        if found is None:
            sys.exit("no stub driver: set STUB_DIR or provide ../shared/emulator-probe")
        for name, words in found.items():
            print(f'    "{name}": "{words}",')
