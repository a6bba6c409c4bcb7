"""NVIDIA H200 SXM (sm_90a). Sources: ../shared/MACHINE-FACTS.md, Table 2 (H: measured for this project,
../shared/h200-microbench/)."""

from . import Constant as C, Machine

H200 = Machine("H200", "sm_90a", {
    "sm_count": C(132, "SMs", "H", "cudaDeviceProp (hb0.txt)"),
    "clock_ghz": C(1.72, "GHz", "H", "1720-1725 MHz effective under sustained wgmma (burn2.txt)"),
    "smem_per_sm": C(233472, "bytes", "H", "cudaDeviceProp"),
    "max_threads_per_sm": C(2048, "threads", "S", "CUDA occupancy limits, sm_90"),
    "registers_per_sm": C(65536, "registers", "S", "64 K 32-bit registers per SM, CUDA C++ Programming Guide, Technical Specifications per Compute Capability (9.0); allocated per warp in units of 256 (emulator/limits.py)"),
    "l2_bytes": C(62914560, "bytes", "H", "60 MiB, cudaDeviceProp"),
    "cost_alu": C(2, "cycles", "E", "as for the B200"),
    "cost_move": C(1, "cycles", "E", "as for the B200"),
    "cost_shared": C(2, "cycles", "E", "issue of a shared-memory access (the LSU takes one warp request per cycle per sub-partition pair, taken as 2); its result: latency_shared"),
    "cost_param": C(1, "cycles", "E", "a constant-bank operand: one issue slot"),
    "cost_global_load": C(2, "cycles", "E", "issue of a global load: the warp goes on until it reads the result (latency_global_load)"),
    "cost_global_store": C(2, "cycles", "E", "issue only"),
    "cost_shfl": C(2, "cycles", "E", "issue of a shuffle (no figure); its result: latency_shfl"),
    "cost_mbarrier": C(2, "cycles", "E", "issue of an mbarrier operation (a shared-memory atomic: the warp goes on; what it returns lands latency_mbarrier later)"),
    "latency_mbarrier": C(32, "cycles", "H", "64 cycles per dependent arrive + try_wait pair in one thread"),
    "cost_named_barrier": C(21, "cycles", "H", "bar.sync, 128 threads: 20.7 cycles"),
    "cost_warp_sync": C(1, "cycles", "E", "bar.warp.sync of a converged warp: 1.00 cycle per instruction per warp, 1 and 4 "
                        "warps, measured on an H100 (sm_90, the H200's SM) by calibration/hopper_warp_ops.cu (2026-11-26)"),
    "cost_cluster_barrier": C(323, "cycles", "H", "barrier.cluster arrive + wait, charged on the wait (the "
                              "arrive issues as an mbarrier arrive)"),
    "cost_tma_issue": C(12, "cycles", "E", "not measured"),
    "cost_mma_issue": C(12, "cycles", "E", "B200 tcgen05.mma issue cost as a proxy for wgmma"),
    "cost_tcgen05_cp_issue": C(12, "cycles", "E", "no tcgen05 on sm_90a; kept for one cost table"),
    "cost_tmem_load": C(2, "cycles", "E", "no tcgen05 on sm_90a; kept for one cost table"),
    "cost_fence": C(8, "cycles", "E", "no figure"),
    "cost_tmem_alloc": C(100, "cycles", "E", "no tcgen05 on sm_90a"),
    "cost_tensormap_release": C(281, "cycles", "E", "tensormap.cp_fenceproxy (a map patched on the device, copied to global memory with .release): the warp waits until the 128-byte write is performed at L2, one L2 round trip: GH200 L2 latency 281 cycles [MD]; no measurement of the instruction found (2026-11-28); only device-side map patching issues it"),
    "cost_tensormap_acquire": C(281, "cycles", "E", "fence.proxy.tensormap::generic.acquire: the TMA unit re-reads the patched 128-byte map from L2 before its next copy through it, one L2 round trip charged at the fence: GH200 L2 latency 281 cycles [MD]; no measurement found (2026-11-28); only device-side map patching issues it"),
    # result latencies (the scoreboard: an instruction waits for the registers it reads; clock.py)
    "latency_alu": C(2, "cycles", "F", "a dependent ALU instruction issues in the next slot: ptxas schedules independent work between a producer and its consumer (PTX order is not issue order); 2 against 4 (the SASS dependent-issue latency) chosen on rows 7 and 13 of tools/data/h200_timing_2026-11-24.json (extra 1, extra 7): fitted there, held out elsewhere"),
    "latency_move": C(1, "cycles", "E", "as cost_move"),
    "latency_shared": C(34, "cycles", "H", "own-SMEM load in a dependent chain: 34.0 cycles"),
    "latency_param": C(4, "cycles", "E", "as an ALU operand"),
    "latency_global_load": C(281, "cycles", "M", "GH200 L2 latency 281 cycles [MD]"),
    "latency_dram_load": C(690, "cycles", "M", "GH200 DRAM latency 690 cycles, pointer chase [MD]"),
    "latency_l1_hit": C(40, "cycles", "M", "H100 SXM / GH200 L1 hit, pointer chase [MD]"),
    "l1_load_bytes": C(24576, "bytes", "E", "the 256 KiB L1 + SMEM pool less the 228 KiB shared-memory "
                       "carve-out a large-SMEM kernel takes, less a margin"),
    "lsu_cycles_per_line": C(1, "cycles", "E", "the SM's load/store unit takes one 128-byte line (L1 wavefront) per cycle: a global access whose 32 lanes touch k lines holds it k cycles (the L1's 128 B/clock per SM)"),
    "alu_cost_factor_tensor_busy": C(2.0, "x", "F", "ALU issue while the SM's tensor pipe executes wgmma, which reads and writes its accumulator in the register file: fitted to the dequantize phase of calibration/sm90_profile.py phases (cases named in BENCHMARKS.md), held out elsewhere"),
    "latency_shfl": C(6, "cycles", "E", "no figure"),
    "latency_tmem_load": C(120, "cycles", "E", "no tcgen05 on sm_90a; kept for one cost table"),
    "wake_latency": C(92.5, "cycles", "H", "mbarrier hand-off between two warps"),
    "try_wait_limit": C(20000, "cycles", "E", "system-dependent try_wait time limit"),
    "wgmma_ii_per_n": C(0.5, "cycles/column", "H", "II = N/2 per SM for m64nNk16 bf16 and k32 e4m3 SS"),
    "wgmma_latency_fixed": C(54, "cycles", "H", "latency 86/118/182 at N = 64/128/256 = 54 + N/2"),
    "mma_ii_fixed_ss_1cta": C(0, "cycles", "E", "no tcgen05 on sm_90a"),
    "mma_ii_fixed_ss_2cta": C(0, "cycles", "E", "no tcgen05 on sm_90a"),
    "mma_latency_fixed_1cta": C(54, "cycles", "H", "wgmma's fixed latency, for a shared pipe model"),
    "mma_latency_fixed_2cta": C(54, "cycles", "E", "no cta_group::2 on sm_90a"),
    "tcgen05_cp_bytes_per_cycle": C(60, "bytes/cycle", "E", "no tcgen05 on sm_90a"),
    "tcgen05_cp_latency": C(116, "cycles", "E", "no tcgen05 on sm_90a"),
    "commit_latency": C(52, "cycles", "E", "B200 figure"),
    "hbm_bytes_per_us": C(4.53e6, "bytes/us", "H", "TMA 1D bulk, 64 KiB in flight per SM: 4.53 TB/s"),
    "hbm_write_bytes_per_us": C(4.51e6, "bytes/us", "E", "taken as the streaming read rate (4.51 TB/s)"),
    "l2_dirty_writeback_fraction": C(0.60, "x l2_bytes", "H", "calibration/h200_dirty_l2.py 2026-11-25: a read of S bytes after "
                                     "a zero-fill flush is 38 MB / hbm_bytes_per_us x (1 - exp(-S / l2_bytes)) slower than "
                                     "after a reading flush (fit over 16 sizes, 4 MB to 1 GB, residual 0.49 us RMS); "
                                     "38 MB = 0.60 of L2; writes: no difference"),
    "hbm_tiled_efficiency": C(0.92, "x hbm rate", "H", "calibration/h200_l2_tma.cu 2026-11-26: TMA boxes of 128 rows x 128 B "
                              "walked along K (rows 1024 and 3584 B apart), 4-12 loads of 16 KiB in flight per SM, "
                              "4.14-4.29 TB/s, against 4.60-4.63 for copies of 16 consecutive KiB: 0.90-0.93"),
    "l2_bytes_per_us": C(9.1e6, "bytes/us", "H", "calibration/h200_l2_tma.cu 2026-11-26: TMA loads of lines in L2, all 132 "
                         "SMs, distinct lines, 1-D and 2-D, 16 and 32 KiB loads, 2-12 in flight: 8.99-9.41 TB/s (one SM "
                         "alone 133 GB/s: the limit is the chip's). The 7.25 TB/s before was the issuing loop of "
                         "../shared/h200-microbench (a 64-bit modulo per load)"),
    "tma_hbm_latency": C(746, "cycles", "H", "TMA HBM miss, 4 KiB: median 859 SM cycles at the 1.98 GHz the H200 runs "
                         "TMA-only kernels at = 434 ns (calibration/h200_l2_tma.cu 2026-11-26; ../shared/h200-microbench: 855), "
                         "746 cycles at this description's 1.72 GHz: DRAM's latency is in nanoseconds"),
    "hbm_latency_load_factor": C(1.5, "x load^2", "H", "a TMA miss's latency x (1 + f load^2): f fitted (least squares) "
                                 "to the measured TMA throughput at 4/8/16/32/64 KiB in flight per SM (calibration/h200_l2_tma.cu "
                                 "2026-11-26: 1.10/1.91/3.08/4.25/4.49 TB/s, splits averaged; the rule gives "
                                 "+3/+2/-3/0/+1%, a fixed latency +13/+31/+47/+7/+1%). It was 1.8 with 855 cycles, fitted "
                                 "to ../shared/h200-microbench's table, whose issuing loop capped its small loads"),
    "tma_l2_latency": C(367, "cycles", "H", "TMA L2 hit, 4 KiB: 367 cycles"),
    "tma_store_latency": C(76, "cycles", "E", "measured on an H100 (sm_90, the H200's SM): a lone 2 KB box store "
                           "completes 142 cycles after its issue (calibration/hopper_tma_store.cu, 2026-11-26), of which 66 "
                           "pass the SM's store unit at tma_store_bytes_per_cycle"),
    "tma_store_bytes_per_cycle": C(31.0, "bytes/cycle", "E", "measured on an H100 (sm_90, the H200's SM): 4 warps each "
                                   "keeping 4 boxes of 2 KB in flight drain 30.8-31.0 B/cycle from one SM, any box shape "
                                   "30.8-31.9; calibration/hopper_tma_store_rate.cu, 2026-11-27"),
    "launch_gap_us": C(1.79, "us", "M", "last CTA end of call k-1 -> first CTA start of call k in the board's protocol "
                       "(flush, 15 calls from Python): 1.79 us median over 132-CTA launches, 1.62-1.79 over all forms "
                       "(calibration/launch_gap.py, 2026-11-28, tools/data/h200_launch_gap_2026-11-28.json); Table 2's "
                       "microbenchmark gave 928 ns, which the description carried until then"),
    "launch_gap_pdl_us": C(0.58, "us", "M", "the same with the PDL attribute, after every CTA triggered: 0.576 us "
                           "median in every form (calibration/launch_gap.py, 2026-11-28); Table 2: 480 ns"),
    "cta_dispatch_us": C(0.00054, "us/CTA", "E", "B200 figure [PB]"),
})
