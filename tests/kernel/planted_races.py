"""Races planted in a copy of submission.py (issue 48): each passes every check that runs the kernel without race
detection, and at a B200's worker count with it, but fails the first checks (eval.py test, tools/check.py --emulate)
on their wrap cases, where the race detector names both accesses.

    PLANTS[name] = (what submission.py has, what the copy has instead, what the race report names)

- early_release: the direct-store epilogue (Sm100GroupedGemm._store_direct) releases the accumulator before the loop
  that reads it: the MMA warp may overwrite the accumulator with a later tile while the epilogue still loads it. Only
  a worker that runs a third tile reuses an accumulator: at a B200's 74 pairs task.yml's tests give none.
- no_tail_fence: the staged epilogue's fence.proxy.async between the stmatrix of C and the TMA store that reads it
  (Sm100GroupedGemm._store_box) is gone: the TMA unit (async proxy) may read C staging before the writes (generic
  proxy) show there.
- no_dealloc_barrier: the epilogue warps' barrier before tcgen05.dealloc is gone: the warp that frees the tensor
  memory may free it while the other epilogue warps still load their accumulators.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLANTS = {
    "early_release": (
        "        if has_rows:\n"
        "            for chunk in range(chunks):\n"
        "                self._store_rows(self._tile_columns(accumulator, chunk), t0 + EPILOGUE_COLUMNS * chunk, rows, odd)\n"
        "            self._release(acc_pipeline, acc_state)\n",
        "        if has_rows:\n"
        "            self._release(acc_pipeline, acc_state)\n"
        "            for chunk in range(chunks):\n"
        "                self._store_rows(self._tile_columns(accumulator, chunk), t0 + EPILOGUE_COLUMNS * chunk, rows, odd)\n",
        "tcgen05.ld",  # the epilogue's load of the accumulator, then the MMA that overwrites it
    ),
    "no_tail_fence": (
        "        cute.arch.fence_proxy(cute.arch.ProxyKind.async_shared, space=cute.arch.SharedSpace.shared_cta)\n"
        "        cute.arch.sync_warp()  # every lane's write and fence precede the store\n",
        "        cute.arch.sync_warp()  # every lane's write and fence precede the store\n",
        "fence.proxy.async",  # the stmatrix, then the TMA store, with no proxy fence between
    ),
    "no_dealloc_barrier": (
        "            self.epilogue_barrier.arrive_and_wait()\n"
        "            tmem.free(acc_tmem_ptr)\n",
        "            tmem.free(acc_tmem_ptr)\n",
        "tcgen05.dealloc",  # another epilogue warp's load, then the dealloc
    ),
}


def plant(folder: Path, name: str) -> Path:
    """A copy of submission.py in `folder` with the race `name` planted (the unplanted text must be there once)."""
    good, bad, _ = PLANTS[name]
    source = (ROOT / "submission.py").read_text()
    assert source.count(good) == 1, f"{name}: submission.py no longer has the text this plant replaces"
    path = folder / "submission.py"
    path.write_text(source.replace(good, bad))
    return path
