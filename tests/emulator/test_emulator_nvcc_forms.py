"""The PTX forms nvcc writes that the DSL's PTX never had (the peer CUDA route, groundtruth/peer_cuda.py), each on a
hand-written kernel or the emulator's own functions: a tensor copy with no load mode (`.tile` by default), the
MMA's `.block16` / `.block32` scale-vector aliases, copies into `.shared::cta`, a scalar `.shared` variable, a cluster shape compiled into
the kernel (`.reqnctapercluster`) and `.maxntid`, and tcgen05.ld's lane field past the 128 lanes."""

import struct
from types import SimpleNamespace

import numpy as np
import pytest

from emulator import EmulatorError, isa, tcgen05, tma  # noqa: F401  (isa registers the handlers)
from emulator.isa.tensor_core import _block_scale_alias
from emulator.launch import CLUSTER_DIMENSION_ATTRIBUTE, execute, with_compiled_cluster
from emulator.limits import LaunchLimitError
from emulator.memory import GlobalMemory
from emulator.ptx import parse_module
from emulator.warp import Program

TMA_KERNEL = """.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 tile[];
.visible .entry k(
	.param .align 128 .b8 k_param_0[128],
	.param .u64 k_param_1
)
.reqntid 32, 1, 1
{{
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<8>;
	.shared .align 8 .u64 bar;
	mov.b64 %rd1, k_param_0;
	cvta.param.u64 %rd2, %rd1;
	ld.param.u64 %rd3, [k_param_1];
	mov.u32 %r1, %tid.x;
	mov.b32 %r2, tile;
	mov.b32 %r3, bar;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra $L_wait;
	mbarrier.init.shared::cta.b64 [%r3], 1;
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 512;
	mov.b32 %r4, 0;
	cp.async.bulk.tensor.2d.shared::cluster.global.{mode}mbarrier::complete_tx::bytes [%r2], [%rd2, {{%r4, %r4}}], [%r3];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
	@!%p2 bra $L_wait;
	shl.b32 %r5, %r1, 4;
	add.s32 %r6, %r2, %r5;
	ld.shared.v4.u32 {{%r7, %r8, %r9, %r10}}, [%r6];
	cvt.u64.u32 %rd4, %r5;
	add.s64 %rd5, %rd3, %rd4;
	st.global.v4.u32 [%rd5], {{%r7, %r8, %r9, %r10}};
	ret;
}}
"""


def _copy_tile(kernel):
    """`kernel` (one warp, TMA_KERNEL's form) run on a 16 x 64 byte source through a map of 8 x 64 boxes:
    (the source, the 512 bytes it wrote)."""
    source = np.arange(64 * 16, dtype=np.uint8).reshape(16, 64)
    out = np.zeros(512, np.uint8)
    tmap = tma.encode_tiled(0, 2, source.ctypes.data, (64, 16), (64,), (64, 8), (1, 1))
    memory = GlobalMemory()
    memory.register(source.ctypes.data, source.nbytes, "source")
    memory.register(out.ctypes.data, out.nbytes, "out")
    launch = SimpleNamespace(kernel_name="k", grid=(1, 1, 1), block=(32, 1, 1), cluster=(1, 1, 1), shared_bytes=1024,
                             attributes={}, params=(tmap, struct.pack("<Q", out.ctypes.data)))
    execute(launch, kernel, memory, step_budget=10_000)
    return source, out


@pytest.mark.parametrize("mode", ["", "tile."])
def test_a_tensor_copy_without_a_load_mode_is_a_tile_copy(mode):
    """ISA 9.7.9.25.5.1: `.load_mode` is optional and `.tile` the default; nvcc's inline asm leaves it out. The
    kernel also declares its mbarrier as a scalar `.shared` variable, as nvcc does a function-scope __shared__."""
    source, out = _copy_tile(TMA_KERNEL.format(mode=mode))
    assert (out == source[:8].reshape(-1)).all()


@pytest.mark.parametrize("form", ["tensor", "1-D"])
def test_a_copy_into_shared_cta_lands_in_the_executing_cta(form):
    """PTX ISA 8.6's `.shared::cta` destination (gau-nernst's v1, v2, v2e): the tensor copy with `.cta_group::1`
    and the 1-D bulk copy (here from the map's address word) land in the executing CTA's shared memory."""
    kernel = TMA_KERNEL.format(mode="")
    if form == "tensor":
        kernel = kernel.replace("tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                                "tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes.cta_group::1")
    else:
        kernel = kernel.replace("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], "
                                "[%rd2, {%r4, %r4}], [%r3];",
                                "ld.param.u64 %rd6, [k_param_0];\n\tcp.async.bulk.shared::cta.global.mbarrier::"
                                "complete_tx::bytes.L2::cache_hint [%r2], [%rd6], 512, [%r3], %rd3;")
    assert kernel != TMA_KERNEL.format(mode="")
    source, out = _copy_tile(kernel)
    assert (out == source[:8].reshape(-1)).all()


def test_other_load_modes_are_refused_by_name():
    with pytest.raises(EmulatorError, match="im2col.*only .tile mode"):
        Program(parse_module(TMA_KERNEL.format(mode="im2col."))["k"])


def test_scalar_shared_variables_are_laid_out_after_the_reserved_window():
    kernel = parse_module(TMA_KERNEL.format(mode=""))["k"]
    bar = next(v for v in kernel.shared if v.name == "bar")
    assert (bar.size, bar.align, bar.extern) == (8, 8, False)
    assert next(v for v in kernel.shared if v.name == "tile").extern


def test_block16_and_block32_name_scale_vectors():
    """ISA 9.7.16.10 (tcgen05.mma, .scale_vectorsize): .block16 = 16 elements per scale = .scale_vec::4X for
    mxf4nvf4's K of 64; .block32 = 2X for the FP4 kinds, 1X for mxf8f6f4 (K 32); .block16 exists for mxf4nvf4 only."""
    assert _block_scale_alias("mxf4nvf4", "block16") == "4X"
    assert _block_scale_alias("mxf4nvf4", "block32") == "2X"
    assert _block_scale_alias("mxf4", "block32") == "2X"
    assert _block_scale_alias("mxf8f6f4", "block32") == "1X"
    with pytest.raises(EmulatorError, match="block16"):
        _block_scale_alias("mxf4", "block16")


def _launch(cluster=(1, 1, 1), attributes=None, block=(32, 1, 1)):
    return SimpleNamespace(kernel_name="k", grid=(4, 1, 1), block=block, cluster=cluster, shared_bytes=0,
                           attributes=attributes or {}, params=())


CLUSTER_KERNEL = """.version 8.8
.target sm_100a
.address_size 64
.visible .entry k()
.maxntid 64
.explicitcluster
.reqnctapercluster 2, 1, 1
{
	ret;
}
"""


def test_a_compiled_cluster_shape_applies_to_a_launch_that_names_none():
    """CUDA's __cluster_dims__ (PTX .reqnctapercluster, ISA 11.4): a <<<>>> launch runs in clusters of that shape;
    a launch attribute naming another shape is refused, the same one accepted."""
    kernel = parse_module(CLUSTER_KERNEL)["k"]
    assert kernel.reqnctapercluster == (2, 1, 1) and kernel.maxntid == (64, 1, 1)
    assert with_compiled_cluster(_launch(), kernel).cluster == (2, 1, 1)
    named = {CLUSTER_DIMENSION_ATTRIBUTE: 4}
    assert with_compiled_cluster(_launch((2, 1, 1), named), kernel).cluster == (2, 1, 1)
    with pytest.raises(LaunchLimitError, match="reqnctapercluster"):
        with_compiled_cluster(_launch((4, 1, 1), named), kernel)


def test_more_threads_than_maxntid_is_refused():
    memory = GlobalMemory()
    with pytest.raises(LaunchLimitError, match="maxntid"):
        execute(_launch(block=(96, 1, 1)), CLUSTER_KERNEL, memory)
    execute(_launch(block=(64, 1, 1)), CLUSTER_KERNEL, memory)  # within it: runs (clusters of 2 from the PTX)


def test_tcgen05_ld_takes_the_lane_modulo_128():
    """gau-nernst's v6b reads a cta_group::2 accumulator at lane 128 * rank + 32 * warp in each CTA of the pair
    and passes the board's checks: the lane field's bits past the 128 lanes do not select another lane."""
    tmem = tcgen05.TensorMemory()
    tmem.alloc(128)
    tmem.cells[:, :128] = np.arange(128, dtype=np.uint32)[:, None] * 1000 + np.arange(128, dtype=np.uint32)
    for warp in range(4):
        plain = tcgen05.tcgen05_ld(tmem, (32 * warp) << 16 | 8, "32x32b", 4, warp)
        high = tcgen05.tcgen05_ld(tmem, (128 + 32 * warp) << 16 | 8, "32x32b", 4, warp)
        assert (plain == high).all() and plain[0, 0] == 32 * warp * 1000 + 8
    with pytest.raises(EmulatorError, match="may access lanes 32..63"):
        tcgen05.tcgen05_ld(tmem, 128 << 16, "32x32b", 4, 1)  # lane 128 is lane 0: not warp 1's
