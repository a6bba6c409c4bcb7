"""NVIDIA B200 (sm_100a). Sources: ../shared/MACHINE-FACTS.md, Table 1 (section numbers below), keys as
there. Every E row is a guess a B200 run should replace (README, "First run on a B200")."""

from . import Constant as C, Machine

B200 = Machine("B200", "sm_100a", {
    # chip (Table 1 section 1)
    "sm_count": C(148, "SMs", "S", "[CC]; [SA-repo] NUM_SMS (1)"),
    "clock_ghz": C(1.86, "GHz", "E", "implied by NVIDIA's dense FP4/FP8/BF16 peaks over 148 SMs; between "
                   "1.845 single-CTA [MODAL-UTC] and 1.965 max [SA-repo] (1)"),
    "smem_per_sm": C(233472, "bytes", "S", "228 KiB/SM [SA-repo] (1)"),
    "max_threads_per_sm": C(2048, "threads", "S", "CUDA occupancy limits, sm_100"),
    "registers_per_sm": C(65536, "registers", "S", "64 K 32-bit registers per SM, CUDA C++ Programming Guide, Technical Specifications per Compute Capability (10.0); allocated per warp in units of 256 (emulator/limits.py)"),
    "l2_bytes": C(132644864, "bytes", "S", "126.5 MiB [SA-repo] L2_SIZE (1)"),
    # per-warp issue costs: the time from one instruction's issue to the next one's in the same warp
    "cost_alu": C(2, "cycles", "E", "a warp instruction on a 16-lane INT/FP32 pipe: 2 cycles; independent ones "
                  "issue back to back, a dependent one waits ~4 (no B200 figure; one warp per scheduler assumed: "
                  "no issue contention)"),
    "cost_move": C(1, "cycles", "E", "register moves and address conversions: ptxas removes most of them"),
    "cost_shared": C(2, "cycles", "E", "issue of a shared-memory access (the LSU takes one warp request per cycle per sub-partition pair, taken as 2); its result: latency_shared"),
    "cost_param": C(1, "cycles", "E", "a constant-bank operand: one issue slot"),
    "cost_global_load": C(2, "cycles", "E", "issue of a global load: the warp goes on until it reads the result (latency_global_load)"),
    "cost_global_store": C(2, "cycles", "E", "issue only: a store does not stall the warp"),
    "cost_shfl": C(2, "cycles", "E", "issue of a shuffle (no figure); its result: latency_shfl"),
    "cost_mbarrier": C(2, "cycles", "E", "issue of an mbarrier operation (a shared-memory atomic: the warp goes on; what it returns lands latency_mbarrier later)"),
    "latency_mbarrier": C(32, "cycles", "E", "H200: 64 cycles per dependent arrive + try_wait pair in one thread"),
    "cost_named_barrier": C(21, "cycles", "E", "H200 bar.sync of 128 threads: 20.7 cycles (Table 2)"),
    "cost_cluster_barrier": C(323, "cycles", "E", "H200 barrier.cluster arrive + wait: 323 cycles (Table 2), "
                              "charged on the wait (the arrive issues as an mbarrier arrive)"),
    "cost_warp_sync": C(1, "cycles", "E", "the H100's bar.warp.sync of a converged warp: 1.00 cycle per instruction "
                        "per warp (calibration/hopper_warp_ops.cu, 2026-11-26); no B200 figure"),
    "cost_tma_issue": C(12, "cycles", "E", "taken equal to the MMA issue cost; not measured"),
    "cost_mma_issue": C(12, "cycles", "M", "~11-12 cycles per tcgen05.mma in the issuing thread [SA-repo] (2)"),
    "cost_tcgen05_cp_issue": C(12, "cycles", "E", "taken equal to the MMA issue cost"),
    "cost_tmem_load": C(2, "cycles", "E", "issue of a tcgen05.ld; its result: latency_tmem_load"),
    "cost_fence": C(8, "cycles", "E", "no figure"),
    "cost_tmem_alloc": C(100, "cycles", "E", "TMEM alloc/dealloc cost not found (7)"),
    "cost_tensormap_release": C(295, "cycles", "E", "tensormap.cp_fenceproxy (a map patched on the device, copied to global memory with .release): the warp waits until the 128-byte write is performed at L2, one L2 round trip: L2 hit latency, pointer chase [MD] (4); no measurement of the instruction found (2026-11-28); only device-side map patching issues it"),
    "cost_tensormap_acquire": C(295, "cycles", "E", "fence.proxy.tensormap::generic.acquire: the TMA unit re-reads the patched 128-byte map from L2 before its next copy through it, one L2 round trip charged at the fence: L2 hit latency, pointer chase [MD] (4); no measurement found (2026-11-28); only device-side map patching issues it"),
    # result latencies (the scoreboard: an instruction waits for the registers it reads; clock.py)
    "latency_alu": C(2, "cycles", "E", "as the H200 description's fitted value: a dependent ALU instruction issues in the next slot (ptxas schedules independent work between them)"),
    "latency_move": C(1, "cycles", "E", "as cost_move"),
    "latency_shared": C(34, "cycles", "E", "H200 own-SMEM load in a dependent chain: 34.0 cycles (Table 2)"),
    "latency_param": C(4, "cycles", "E", "as an ALU operand"),
    "latency_global_load": C(295, "cycles", "M", "L2 hit latency, pointer chase [MD] (4)"),
    "latency_dram_load": C(860, "cycles", "M", "DRAM (miss) latency, pointer chase [MD] (4)"),
    "latency_l1_hit": C(40, "cycles", "M", "L1 hit latency, pointer chase [MD] (4)"),
    "l1_load_bytes": C(24576, "bytes", "E", "the 256 KiB L1 + SMEM pool [MD] less the 228 KiB shared-memory "
                       "carve-out a large-SMEM kernel takes, less a margin"),
    "lsu_cycles_per_line": C(1, "cycles", "E", "the SM's load/store unit takes one 128-byte line (L1 wavefront) per cycle: a global access whose 32 lanes touch k lines holds it k cycles (the L1's 128 B/clock per SM)"),
    "alu_cost_factor_tensor_busy": C(1.0, "x", "E", "tcgen05.mma accumulates in tensor memory, not the register file: no contention assumed"),
    "latency_shfl": C(6, "cycles", "E", "no figure"),
    "latency_tmem_load": C(120, "cycles", "E", "tcgen05.ld latency not found (5: an unverified '~420' comment); "
                           "an x32 load of 32 lanes x 32 columns taken as ~120 cycles"),
    # synchronization (Table 1 section 6: not found for B200; H200 proxies)
    "wake_latency": C(92.5, "cycles", "E", "H200 mbarrier hand-off, arrive -> other warp's try_wait returns "
                      "(Table 2)"),
    "try_wait_limit": C(20000, "cycles", "E", "the ISA's system-dependent try_wait time limit; only a "
                        "kernel that peeks at a barrier and goes on feels it"),
    # tensor core (Table 1 section 2), kind::mxf4nvf4 taken to time as kind::mxf8f6f4 (E, see there)
    "mma_ii_fixed_ss_1cta": C(32, "cycles", "E", "II_SS = max(N/2, 32 + N/4) at M=128 1-CTA: the fit of "
                              "[SA-repo]'s SS table by SMEM reads at 128 B/clk (2)"),
    "mma_ii_fixed_ss_2cta": C(32, "cycles", "E", "II_SS = max(N/2, 32 + N/8) per pair at M=256 2-CTA: "
                              "40 predicted vs 43.5 measured at N=64 (2)"),
    "mma_latency_fixed_1cta": C(136, "cycles", "M", "SS 1-CTA M=128: latency = N/2 + 136 [SA-repo] (2)"),
    "mma_latency_fixed_2cta": C(173, "cycles", "M", "SS 2-CTA M=256: 205/237/301 at N=64/128/256 = "
                                "N/2 + 173 [SA-repo] (2)"),
    "tcgen05_cp_bytes_per_cycle": C(60, "bytes/cycle", "E", "[MODAL-UTC]'s ~68 cycles marginal per copy, its "
                                    "shape not stated, read as a 128x256b copy (4 KiB) (5); a copy occupies the pipe "
                                    "for the shared-memory bytes it reads at this rate"),
    "tcgen05_cp_latency": C(116, "cycles", "M", "168 for one copy incl. commit + wait, less the 52-cycle "
                            "barrier round trip [MODAL-UTC] (5)"),
    "commit_latency": C(52, "cycles", "M", "commit + mbarrier round trip in [MODAL-UTC]'s tcgen05.cp test (5)"),
    # memory (Table 1 sections 3 and 4)
    "hbm_bytes_per_us": C(7.22e6, "bytes/us", "M", "7.22 TB/s bulk copy into SMEM [PB]; TMA saturates at "
                          "7.06-7.26 TB/s with 64 KiB in flight per SM [SA-repo] (3, 4)"),
    "hbm_write_bytes_per_us": C(7.22e6, "bytes/us", "E", "no isolated write figure (7): taken as the read "
                                "rate, one HBM shared by reads and writes"),
    "l2_dirty_writeback_fraction": C(0.60, "x l2_bytes", "E", "the H200's, measured (h200.py); with it a read of one "
                                     "L2's size into a dirty L2 runs at 5.2 TB/s, within [PB]'s 5.05-5.33 TB/s total for "
                                     "HBM reads after a zero-fill flush (4)"),
    "hbm_tiled_efficiency": C(0.92, "x hbm rate", "E", "the H200's (h200.py: 128-byte rows walked along K against "
                              "consecutive bytes); [SA-repo]'s 2-D table read 512-byte rows (3)"),
    "l2_bytes_per_us": C(15.5e6, "bytes/us", "E", "TMA loads of lines in L2: [PB]'s 21.6-22.7 TB/s for LDG (4) x the "
                         "H200's TMA / LDG ratio, both measured there (9.1 / 12.7 TB/s = 0.72: h200.py)"),
    "tma_hbm_latency": C(1000, "cycles", "E", "derived: 148 SMs x 4 KiB in flight at 1.10-1.17 TB/s "
                         "[SA-repo] throughput table = 0.53 us per round trip (3)"),
    "hbm_latency_load_factor": C(1.0, "x load^2", "M", "a TMA miss's latency x (1 + f load^2): f fitted to [SA-repo]'s "
                                 "TMA throughput at 4-64 KiB in flight per SM (1.13/2.0/3.6/5.65/7.14 TB/s; the rule "
                                 "gives -2/+4/0/-1/+1%, a fixed latency 0/+13/+25/+28/+1%) (3)"),
    "tma_l2_latency": C(340, "cycles", "E", "H200 TMA L2 hit 316-367 cycles for <= 4 KiB (Table 2); B200 "
                        "L2 hit 295 cycles [MD]"),
    "tma_store_latency": C(76, "cycles", "E", "the H100's: a lone 2 KB box store completes 142 cycles after its issue "
                           "(wait_group.read and wait_group alike; calibration/hopper_tma_store.cu, 2026-11-26), of which 66 "
                           "pass the SM's store unit (tma_store_bytes_per_cycle); no B200 figure"),
    "tma_store_bytes_per_cycle": C(31.0, "bytes/cycle", "E", "the H100's SM store unit with stores in flight: 4 warps each "
                                   "keeping 4 boxes of 2 KB (32 x 64 B, ours) in flight drain 30.8-31.0 B/cycle from one "
                                   "SM, and every box shape tried 30.8-31.9 (the rate is per byte, not per box or row); "
                                   "calibration/hopper_tma_store_rate.cu, 2026-11-27 (tools/data/hopper_tma_store_rate_2026-11-27.txt); "
                                   "every SM storing at once: 14-15 per SM, L2 and HBM shared (the clock's L2 and HBM servers); no B200 figure"),
    # launch (Table 1 section 7)
    "launch_gap_us": C(1.79, "us", "E", "the H200's, measured in the board's protocol (h200.py: last CTA end of "
                       "call k-1 -> first CTA start of call k, 15 calls from Python after the flush; "
                       "calibration/launch_gap.py, 2026-11-28); not found for B200"),
    "launch_gap_pdl_us": C(0.58, "us", "E", "the H200's with PDL, measured the same way (h200.py)"),
    "cta_dispatch_us": C(0.00054, "us/CTA", "M", "~0.54 ns per CTA GPU-wide [PB] (7)"),
    # cluster launch control (isa/launch_control.py)
    "clc_response_latency": C(295, "cycles", "E", "clusterlaunchcontrol.try_cancel issue -> response written and "
                              "complete-tx: no public figure (PTX ISA; CUDA Programming Guide 4.12 'Work Stealing with "
                              "Cluster Launch Control'; Triton's CLC tutorial says only that the latency is worth "
                              "hiding; searched 2026-11-28). libcu++'s cuda::for_each_canceled_block: it 'may reduce "
                              "work-stealing latency compared to global memory atomics', so at most an atomic's "
                              "round trip: taken as an L2 hit's (latency_global_load, [MD])"),
})
