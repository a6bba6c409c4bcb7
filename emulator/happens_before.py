"""Happens-before race detection: which accesses are ordered, whatever interleaving the scheduler ran.

Built like ThreadSanitizer's detector (vector clocks, a shadow word per memory granule) over the PTX memory
model (ISA chapter 8: proxies, release/acquire patterns, `fence.proxy.async`, `fence.mbarrier_init`). The
functional core reports events through `grid.trace` (None when detection is off: one attribute test per
event site); the scheduler does not know this module exists. Nothing here changes what the kernel computes.

- **Agents.** Each warp is an agent (its 32 lanes run together: races inside one warp are not looked for).
  Asynchronous units act on a warp's behalf, each as its own agent: a TMA load unit per issuing warp and
  signalled mbarrier (loads that complete on one barrier are in that barrier's phase order), a TMA store unit
  per issuing warp (bulk groups complete in order), and each CTA's tensor pipe (tcgen05.mma and tcgen05.cp
  execute in issue order, ISA 9.7.16.6). An operation starts with what its issuer had seen at issue (the
  issuer's clock advances past the issue, so the issuer's later accesses are not ordered before it).
- **Synchronization** joins vector clocks: mbarrier arrive / complete-tx (release) into the barrier's phase,
  a try_wait/test_wait that observes the phase complete (acquire: every completed phase's releases);
  `tcgen05.commit`'s arrive releases the tensor pipe's work issued before it; `bar.sync`/`bar.arrive` (the
  waiting warps acquire every arrival of the generation); `barrier.cluster.arrive`/`wait`;
  `cp.async.bulk.wait_group` acquires the store groups it waited for.
- **Synchronization through memory** (ISA 8.8 release and acquire patterns, 8.9.2 observation order, 8.9.4
  synchronizes-with). Strong accesses (`.relaxed`, `.acquire`, `.release`, `.volatile`, `.mmio` loads and
  stores; every atom and red; memory_ops.MemoryOrder) of one location (an address, in global or one CTA's
  shared memory) form its release sequence: {(releasing CTA, scope): vector clock}. A write publishes what
  its warp releases: its own clock if it is a release operation (st.release, atom/red .release or
  .acq_rel), and the clock of the warp's latest release fence (fence.sc, fence.acq_rel, fence.release,
  membar) before it, whatever its own semantics; an atomic write keeps what others published there (a
  read-modify-write continues the sequence), any other write replaces it. A read observes what the
  location holds: an acquire operation (ld.acquire, atom .acquire/.acq_rel) joins it into its warp's clock
  at once; any other strong read keeps it until the warp's next acquire fence (fence.sc, fence.acq_rel,
  fence.acquire, membar) joins it (red reads nothing: its read forms no acquire pattern). A publication
  reaches a reader only where the two are morally strong (8.7): the narrowest scope on the way (release
  fence, write, read, acquire fence) includes both threads (`.cta`: same CTA, `.cluster`: same cluster,
  `.gpu` and `.sys`: the grid). Strong accesses that are morally strong do not race with each other; a weak
  access and a strong one, or two weak ones, race as any pair does.
- **Proxies.** Shared memory written through the generic proxy (st.shared, stmatrix, tcgen05.alloc's
  address) and then accessed through the async proxy (a TMA store reading it, an MMA or tcgen05.cp reading
  it, a TMA load overwriting it) needs, besides happens-before, a `fence.proxy.async` executed by the
  writing warp after its write and before the async access (ISA 8.x "proxies"; CUTLASS's epilogue fences in
  every writing thread, then syncs). An mbarrier signalled by an asynchronous unit (complete-tx, commit) or
  from another CTA needs a `fence.mbarrier_init` by the initializing warp between its `mbarrier.init` and
  that signal.
- **CTA pairs.** A `cta_group::2` alloc, dealloc or relinquish_alloc_permit orders nothing between the two
  CTAs (ISA 9.7.16.5: the first warp "could block" until the second issues it; relying on it is
  non-deterministic). Each warp's half of a pair's dealloc is checked as a write by that warp against the
  peer CTA's tensor memory too (`pair_dealloc`): the first warp may free both CTAs' columns.
- **A CTA's exit** writes the whole of its shared memory (its lifetime ends) as an agent that has seen what
  each of its warps had seen at exit: an asynchronous access not ordered before the exit races with it.
- **Shadow memory.** Shared memory in 16-byte granules per CTA, tensor memory in (32-lane quarter, column)
  cells per CTA, global memory in 16-byte granules per registered region (made when first accessed). Each
  granule keeps its last write (agent, clock, PTX line, proxy) and up to two reads by agents not ordered
  with each other. Proxies are checked in shared memory only. An asynchronous unit that repeats its last
  access of a memory (the same span, nothing else entered there since: the 32 lanes of a warp issuing one
  TMA store) only moves that access's clock forward (`_repeat`): the full check could find nothing new.
- **A race** is a pair of accesses to one granule, one a write, by different agents, the earlier not
  ordered before the later (or, across proxies, ordered without the fence). It is an EmulatorError of kind
  "race" raised at the second access, naming both PTX lines, both agents, the address and the missing order.

Not seen: races inside a warp (its lanes are one agent: a release or acquire by one lane counts for the
whole warp); reads of global memory by TMA loads (TMA stores' writes and warps' loads and stores are seen);
a third concurrent reader of one granule (two slots); `tcgen05.fence::before_thread_sync/after_thread_sync`
and `tcgen05.wait::ld/st` (NVIDIA's epilogue has neither, DESIGN.md); `.relaxed`/`.release` qualifiers of
mbarrier operations (every arrive releases, every successful wait acquires). Of the memory model: the
second release form (a release operation on M, then a strong write of M, continues the release: here the
strong write publishes only the warp's release fences) and the second acquire form (a strong read of M,
then an acquire operation on M: here the acquire joins what M holds when it reads); fence.sc's total
order (it is taken as fence.acq_rel: store-buffering outcomes are not looked for); `.sync_restrict`
fences, `red.async`, `mbarrier`'s own `.release`/`.acquire` scopes; mixed-size and partially overlapping
strong accesses (a location is its first byte's address); `.gpu` and `.sys` are one scope (one GPU). A
strong location sharing a 16-byte granule with weakly accessed data of another agent is reported as a
race with that data (the shadow's granule).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from .errors import EmulatorError

CLUSTER, GPU = 2, 3  # memory_ops.SCOPES' codes of .cluster and .gpu
GRANULE = 16  # bytes of shared and global memory per shadow entry
TMEM_QUARTER = 32  # tensor memory lanes per shadow entry (a warp's tcgen05.ld reaches one quarter)
TMEM_COLUMNS = 512


class RaceError(EmulatorError):
    """Two conflicting accesses no synchronization orders: `where` is the address, the message both sides."""

    def __init__(self, message: str, where: str):
        super().__init__("race", message, where)


class Agent:
    """A warp or an asynchronous unit: its id and vector clock {agent id: clock} (its own entry is its
    clock). `proxy_fences` are the clocks of its fence.proxy.async, `init_fences` of its fence.mbarrier_init.
    A warp's `cta` decides what its scopes include; `released` ({scope: vector clock}) is what its latest
    release fence of each scope released, for a later strong write to publish; `observed` ({(releaser's
    CTA, scope): vector clock}) what its strong reads found published since its last acquire fence."""

    __slots__ = ("id", "label", "vc", "proxy_fences", "init_fences", "cta", "released", "observed")

    def __init__(self, ident: int, label: str, cta=None):
        self.id = ident
        self.label = label
        self.vc = {ident: 1}
        self.proxy_fences: list = []
        self.init_fences: list = []
        self.cta = cta
        self.released: dict = {}
        self.observed: dict = {}

    def tick(self) -> None:
        self.vc[self.id] += 1


class Access:
    """Who is accessing: an agent id, its clock at the access, the vector clock it has seen, a description
    index (agent and PTX line), whether it goes through the async proxy, and the scope of a strong access (0:
    a weak one)."""

    __slots__ = ("id", "clock", "vc", "desc", "asynchronous", "scope")

    def __init__(self, ident, clock, vc, desc, asynchronous, scope=0):
        self.id, self.clock, self.vc, self.desc, self.asynchronous = ident, clock, vc, desc, asynchronous
        self.scope = scope


def join(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def covers(scope: int, cta, other) -> bool:
    """Does `scope` (memory_ops.SCOPES' code) of a thread in `cta` include the threads of `other` (ISA 8.5)?
    One GPU: .gpu and .sys include every thread of the grid."""
    return scope >= GPU or cta is other or (scope == CLUSTER and cta.cluster is other.cluster)


class Shadow:
    """Last write and two unordered reads per granule, as parallel arrays of three rows (row 0 the write,
    rows 1 and 2 the reads), each row of `shape` ((n,) granules, or (4 quarters, 512 columns) of tensor
    memory); `scope` is a strong access's scope (0 for a weak one). An empty entry (agent -1) has clock 0, so
    that no threshold is below it (HappensBefore._unordered). `w_generic`: the last write went through the
    generic proxy. `version` counts the accesses entered (HappensBefore._repeat). A selection of granules is
    an index array, or a slice (a tuple of slices for tensor memory): a view, the cheapest to read and write."""

    def __init__(self, shape):
        self.shape = tuple(shape) if isinstance(shape, tuple) else (shape,)
        self.version = 0
        self.agent = np.full((3, *self.shape), -1, np.int32)
        self.clock = np.zeros((3, *self.shape), np.int64)
        self.desc = np.zeros((3, *self.shape), np.int32)
        self.scope = np.zeros((3, *self.shape), np.int8)
        self.w_generic = np.zeros(self.shape, bool)

    def first(self, selection, mask) -> tuple:
        """(position, granule) of the lowest granule of `selection` that `mask` (over the selection) holds:
        the one a report names, whatever the order of an index array and its repeats."""
        if isinstance(selection, np.ndarray):
            g = int(selection[mask].min())
            return int(np.flatnonzero(mask & (selection == g))[0]), g
        k = int(np.flatnonzero(mask)[0])  # slices ascend
        return k, int(np.arange(int(np.prod(self.shape))).reshape(self.shape)[selection].reshape(-1)[k])


class HappensBefore:
    def __init__(self, grid):
        self.grid = grid
        self.agents: list[Agent] = []
        self.warp_agents: dict = {}
        self.units: dict = {}  # (kind, key) -> Agent of an asynchronous unit
        self.descs: list = []  # (agent id, PTX text) per description index
        self.desc_index: dict = {}
        self.stack: list = []  # the asynchronous operation executing now (Access), innermost last
        self.shadows: dict = {}  # id(memory object: shared, tensor, a global region's view) -> Shadow
        self.barrier_state: dict = {}  # id(mbarrier) -> [current phase vc, completed vc, init (agent, clock, desc)]
        self.named: dict = {}  # id(named barrier) -> [vc, waiting agents]
        self.cluster: dict = {}  # (id(cluster barrier), generation) -> [vc, waiting agents, complete]
        # a location's release sequence: (memory, address) -> {(releaser's CTA, scope): vector clock released}
        self.locations: dict = {}
        # the last asynchronous span access entered per memory (HappensBefore._repeat):
        # memory key -> (span key, agent id, shadow, its version after the access, granules, write)
        self.repeats: dict = {}

    # ------------------------------------------------------------------ agents and descriptions
    def _new_agent(self, label: str, cta=None) -> Agent:
        agent = Agent(len(self.agents), label, cta)
        self.agents.append(agent)
        return agent

    def warp(self, w) -> Agent:
        agent = self.warp_agents.get(w)
        if agent is None:
            agent = self.warp_agents[w] = self._new_agent(f"{w.label} ({w.role})", w.cta)
        return agent

    def _desc(self, agent_id: int, index: int) -> int:
        key = (agent_id, index)
        d = self.desc_index.get(key)
        if d is None:
            d = self.desc_index[key] = len(self.descs)
            self.descs.append((agent_id, _short(self.grid.program.where(index))))
        return d

    def warp_access(self, w, scope: int = 0) -> Access:
        agent = self.warp(w)
        return Access(agent.id, agent.vc[agent.id], agent.vc, self._desc(agent.id, w.last_index), False, scope)

    def issue(self, w, unit: tuple, label: str) -> Access:
        """Warp `w` hands work to the asynchronous unit `unit` (a hashable key): the operation's Access.
        The unit's clock joins what the issuer has seen; the issuer's clock moves past the issue."""
        issuer = self.warp(w)
        agent = self.units.get(unit)
        if agent is None:
            agent = self.units[unit] = self._new_agent(label)
        agent.tick()
        join(agent.vc, issuer.vc)
        issuer.tick()
        key = (agent.id, w.last_index, issuer.id)
        desc = self.desc_index.get(key)
        if desc is None:
            desc = self.desc_index[key] = len(self.descs)
            text = f"{_short(self.grid.program.where(w.last_index))} (issued by {issuer.label})"
            self.descs.append((agent.id, text))
        return Access(agent.id, agent.vc[agent.id], dict(agent.vc), desc, True)

    def begin(self, access: Access | None) -> None:
        self.stack.append(access)

    def end(self) -> None:
        self.stack.pop()

    # ------------------------------------------------------------------ memory
    def shared(self, w, memory, offsets, nbytes: int, write: bool, order=None) -> None:
        """A warp's generic-proxy access of `nbytes` at each of `offsets` in one CTA's shared memory; `order`:
        a strong access's memory_ops.MemoryOrder."""
        offsets = np.asarray(offsets, np.int64)
        first = offsets // GRANULE
        last = (offsets + nbytes - 1) // GRANULE
        granules = np.concatenate([first, last]) if (first != last).any() else first  # repeats allowed
        self._shared_granules(memory, granules, self.warp_access(w, order.scope if order is not None else 0), write)
        if order is not None:
            self._synchronize(w, id(memory), offsets, nbytes, order)

    def shared_range(self, memory, offset: int, nbytes: int, write: bool) -> None:
        """The executing asynchronous operation's access of shared memory bytes [offset, offset + nbytes)."""
        access = self.stack[-1] if self.stack else None
        if access is None or nbytes <= 0:
            return
        span = (offset, nbytes, write)
        if self._repeat(id(memory), span, access):
            return
        self._shared_granules(memory, slice(offset // GRANULE, (offset + nbytes - 1) // GRANULE + 1), access,
                              write, repeat=(id(memory), span))

    def _shared_granules(self, memory, granules, access: Access, write: bool, repeat=None) -> None:
        """`access` of these 16-byte granules of one CTA's shared memory."""
        self._access(self._shadow(memory, memory.size // GRANULE + 1), granules, access, write,
                     lambda g: f"shared 0x{(memory.rank << 24) | int(g) * GRANULE:x} (CTA rank {memory.rank})",
                     repeat=repeat)

    def _repeat(self, memory_key, span, access: Access) -> bool:
        """The fast path of an asynchronous unit repeating its last access of a memory: the same span, by the
        same agent (a later operation of it: a later clock, a vector clock that includes the earlier one's),
        with nothing else entered in that memory's shadow since. Every entry it meets is the earlier access's
        own (skipped: same agent) or one the earlier access was checked against and found ordered (so is this
        one); only its clock and description replace the earlier's. This is what the 32 lanes of a warp that
        issue the same TMA store together make (each lane's copy is checked: bulk async-groups are per
        thread), as exact as the full check."""
        memo = self.repeats.get(memory_key)
        if memo is None:
            return False
        key, agent_id, shadow, version, granules, write = memo
        if key != span or agent_id != access.id or version != shadow.version:
            return False
        row = 0 if write else 1
        shadow.clock[row][granules] = access.clock
        shadow.desc[row][granules] = access.desc
        return True

    def tmem(self, memory, lane: int, nlanes: int, column: int, ncols: int, write: bool) -> None:
        """Cells [lane, lane + nlanes) x [column, column + ncols) of one CTA's tensor memory, by the executing
        asynchronous operation or the warp whose tcgen05.ld runs (`begin`)."""
        access = self.stack[-1] if self.stack else None
        if access is None:
            return
        granules = (slice(lane // TMEM_QUARTER, min(lane + nlanes - 1, 127) // TMEM_QUARTER + 1),
                    slice(column, min(column + ncols, TMEM_COLUMNS)))  # beyond: tcgen05.py's check reports it
        self._access(self._shadow(memory, (4, TMEM_COLUMNS)), granules, access, write,
                     lambda g: f"tensor memory lanes {int(g) // TMEM_COLUMNS * 32}..{int(g) // TMEM_COLUMNS * 32 + 31}"
                               f" column {int(g) % TMEM_COLUMNS}")

    def pair_dealloc(self, w, memory, column: int, ncols: int) -> None:
        """Warp `w`'s half of a `tcgen05.dealloc.cta_group::2` against the peer CTA's tensor memory `memory`.
        The two warps perform the deallocation collectively, and the first to issue it "could block" until the
        second does, or not (ISA 9.7.16.5, Table 46; its second example calls a program that relies on the
        block non-deterministic): each half may free the peer's columns too, so each must be ordered after
        every access to them ("it suffices to ensure that there are no concurrent Tensor Memory accesses from
        the Peer CTA", Table 47). Checked as a write by `w`, not recorded: the peer's own half records the free
        of its cells (the two halves are one operation and do not race with each other)."""
        agent = self.warp(w)
        desc = len(self.descs)
        text = (f"{_short(self.grid.program.where(w.last_index))} (its pair's deallocation frees the peer CTA's "
                "columns too: PTX ISA 9.7.16.5)")
        self.descs.append((agent.id, text))
        granules = (slice(0, 4), slice(column, min(column + ncols, TMEM_COLUMNS)))
        self._access(self._shadow(memory, (4, TMEM_COLUMNS)), granules,
                     Access(agent.id, agent.vc[agent.id], agent.vc, desc, False), True,
                     lambda g: f"tensor memory lanes {int(g) // TMEM_COLUMNS * 32}..{int(g) // TMEM_COLUMNS * 32 + 31}"
                               f" column {int(g) % TMEM_COLUMNS} of the peer CTA", record=False)

    def global_lanes(self, w, addresses, nbytes: int, write: bool, order=None) -> None:
        """A warp's access of `nbytes` at each of `addresses` in global memory; `order` as for `shared`."""
        addresses = np.asarray(addresses, np.int64)
        self._global(addresses, addresses + nbytes, self.warp_access(w, order.scope if order is not None else 0),
                     write)
        if order is not None:
            self._synchronize(w, "global", addresses, nbytes, order)

    def global_writes(self, spans) -> None:
        """The executing asynchronous operation wrote global memory: (address, nbytes) pairs."""
        access = self.stack[-1] if self.stack else None
        if access is not None and spans:
            span = tuple(spans)
            if self._repeat("global", span, access):
                return
            starts = np.array([a for a, _ in spans], np.int64)
            self._global(starts, starts + np.array([n for _, n in spans], np.int64), access, True,
                         repeat=("global", span))

    def _global(self, starts, ends, access, write, repeat=None) -> None:
        """Bytes [starts[i], ends[i]) of global memory, shadowed per registered region."""
        lo, hi = int(starts.min()), int(ends.max())
        region = self.grid.global_memory.region(lo, hi - lo)
        if region is None:  # spread over several regions (or outside all: memory.py reports that)
            if starts.size > 1:
                for a, b in zip(starts.tolist(), ends.tolist()):
                    self._global(np.array([a]), np.array([b]), access, write)
            return
        base, view = region
        origin = base // GRANULE
        first, last = starts // GRANULE - origin, (ends - 1) // GRANULE - origin
        lengths = last - first + 1
        if (lengths == 1).all():
            granules = first  # repeats and any order: _access allows both
        else:
            offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            granules = np.repeat(first, lengths) + offsets
        shadow = self._shadow(view, (base + view.size - 1) // GRANULE - origin + 1)
        self._access(shadow, granules, access, write, lambda g: f"global 0x{(int(g) + origin) * GRANULE:x}",
                     proxies=False, repeat=repeat)

    def _shadow(self, memory, shape) -> Shadow:
        shadow = self.shadows.get(id(memory))
        if shadow is None:
            shadow = self.shadows[id(memory)] = Shadow(shape)
        return shadow

    def _unordered(self, agents, clocks, access):
        """Boolean mask of the entries (agent, clock) not ordered before `access` (empty slots are ordered),
        or None when every entry is ordered."""
        if not agents.size:
            return None
        first = int(agents.flat[0])
        if (agents == first).all():  # the common case: one agent wrote (or read) the whole span, or none did
            if first < 0 or first == access.id:
                return None
            bad = clocks > access.vc.get(first, 0)
            return bad if bad.any() else None
        if agents.size > 4 * len(self.agents):  # a large span (a CTA's exit): one threshold per agent, gathered
            thresholds = np.zeros(len(self.agents) + 1, np.int64)  # an agent not in the vector clock: 0
            for a, seen in access.vc.items():
                thresholds[a] = seen
            thresholds[access.id] = thresholds[-1] = np.iinfo(np.int64).max  # itself; -1: an empty entry
            bad = clocks > thresholds[agents]
            return bad if bad.any() else None
        bad = np.zeros(agents.shape, bool)
        for a in np.unique(agents).tolist():
            if a < 0 or a == access.id:
                continue
            bad |= (agents == a) & (clocks > access.vc.get(a, 0))
        return bad if bad.any() else None

    def _access(self, shadow: Shadow, granules, access: Access, write: bool, where, proxies: bool = True,
                record: bool = True, repeat=None) -> None:
        """Check `access` of `granules` (a selection: Shadow; an index array may repeat granules and be in any
        order) against the shadow's last write and reads; then, if `record`, enter it (`repeat`: (memory key,
        span key) of an asynchronous span access, for `_repeat`)."""
        kind = "write" if write else "read"
        agent, clock = shadow.agent, shadow.clock
        w_agent = agent[0][granules]
        w_clock = clock[0][granules]
        bad = self._unordered(w_agent, w_clock, access)
        if bad is not None and access.scope:
            bad = self._not_morally_strong(bad, shadow.scope[0][granules], w_agent, access)
        if bad is not None:
            self._report_entry(shadow, granules, 0, bad, w_agent, w_clock, access, kind, where)
        if access.asynchronous and proxies:
            self._proxy_check(shadow, granules, w_agent, w_clock, access, kind, where)
        if write:
            for row in (1, 2):
                r_agent = agent[row][granules]
                r_clock = clock[row][granules]
                bad = self._unordered(r_agent, r_clock, access)
                if bad is not None and access.scope:
                    bad = self._not_morally_strong(bad, shadow.scope[row][granules], r_agent, access)
                if bad is not None:
                    self._report_entry(shadow, granules, row, bad, r_agent, r_clock, access, kind, where)
            if not record:
                return
            agent[0][granules] = access.id
            agent[1][granules] = -1
            agent[2][granules] = -1
            clock[0][granules] = access.clock
            clock[1][granules] = 0
            clock[2][granules] = 0
            shadow.desc[0][granules] = access.desc
            shadow.scope[0][granules] = access.scope
            shadow.w_generic[granules] = not access.asynchronous
        else:
            keep = self._unordered(agent[1][granules], clock[1][granules], access)
            if keep is not None:  # an earlier read not ordered before this one moves to the second slot
                for array in (agent, clock, shadow.desc, shadow.scope):
                    if isinstance(granules, np.ndarray):
                        moved = granules[keep]
                        array[2][moved] = array[1][moved]
                    else:  # views
                        array[2][granules][keep] = array[1][granules][keep]
            agent[1][granules] = access.id
            clock[1][granules] = access.clock
            shadow.desc[1][granules] = access.desc
            shadow.scope[1][granules] = access.scope
        shadow.version += 1
        if repeat is not None:
            self.repeats[repeat[0]] = (repeat[1], access.id, shadow, shadow.version, granules, write)

    def _report_entry(self, shadow, granules, row: int, bad, agents, clocks, access: Access, kind: str, where):
        """The race of `access` with the first unordered entry of `row` (0: the write, 1 and 2: reads)."""
        k, g = shadow.first(granules, bad)
        self._report(where(g), ("write" if row == 0 else "read", int(shadow.desc[row].reshape(-1)[g])),
                     (kind, access.desc), self._missing(access, int(agents.reshape(-1)[k]), int(clocks.reshape(-1)[k]),
                                                        int(shadow.scope[row].reshape(-1)[g])))

    def _not_morally_strong(self, bad, scopes, agents, access):
        """`bad` (unordered earlier entries) less those that are morally strong with the strong `access`
        (ISA 8.7: both strong, each one's scope including the other's thread): such pairs do not race."""
        cta = self.agents[access.id].cta
        bad = bad.copy()
        flat, flat_scopes, flat_agents = bad.reshape(-1), scopes.reshape(-1), agents.reshape(-1)
        for k in np.flatnonzero(flat & (flat_scopes > 0)).tolist():
            if covers(min(int(flat_scopes[k]), access.scope), self.agents[int(flat_agents[k])].cta, cta):
                flat[k] = False
        return bad if bad.any() else None

    def _proxy_check(self, shadow, granules, w_agent, w_clock, access, kind, where) -> None:
        """An async-proxy access after a generic-proxy write: the writer must have fenced in between."""
        generic = shadow.w_generic[granules]
        if not generic.any():
            return
        generic = generic & (w_agent != access.id)
        if not generic.any():
            return
        pairs = set(zip(w_agent[generic].tolist(), w_clock[generic].tolist()))
        for agent_id, clock in pairs:
            fences = self.agents[agent_id].proxy_fences
            i = bisect_left(fences, clock)
            if i < len(fences) and fences[i] <= access.vc.get(agent_id, 0):
                continue
            _, g = shadow.first(granules, generic & (w_agent == agent_id) & (w_clock == clock))
            self._report(where(g), ("generic-proxy write", int(shadow.desc[0].reshape(-1)[g])),
                         (f"async-proxy {kind}", access.desc),
                         f"ordered, but {self.agents[agent_id].label} executed no fence.proxy.async between its "
                         "write and this access (PTX ISA 8: generic and async proxies)")

    # ------------------------------------------------------------------ fences
    def fence(self, w, kind: str) -> None:
        agent = self.warp(w)
        (agent.proxy_fences if kind == "proxy.async" else agent.init_fences).append(agent.vc[agent.id])
        agent.tick()

    def memory_fence(self, w, order) -> None:
        """A thread fence (fence.sc, fence.acq_rel, fence.acquire, fence.release; membar): its acquire side
        makes what the warp's earlier strong reads observed visible to it; its release side is what the
        warp's later strong writes publish (ISA 8.8: a strong read then an acquire fence is an acquire
        pattern, a release fence then a strong write a release pattern)."""
        agent = self.warp(w)
        if order.sem != "release":
            kept = {}
            for key, vc in agent.observed.items():
                if covers(min(key[1], order.scope), key[0], agent.cta):
                    join(agent.vc, vc)
                else:
                    kept[key] = vc
            agent.observed = kept
        if order.sem != "acquire":
            agent.released[order.scope] = dict(agent.vc)
            agent.tick()

    # ------------------------------------------------------------------ synchronization through memory
    def _synchronize(self, w, space, starts, nbytes: int, order) -> None:
        """A strong access of `nbytes` at each of `starts` in `space` (global, or a shared memory's id), one
        location per `order.element` bytes (ISA 8.2.4), after its race check: reads observe the locations'
        release sequences, writes extend them (ISA 8.9.2 observation order, 8.9.4 synchronizes-with)."""
        agent = self.warp(w)
        keys = {(space, a + e) for a in starts.tolist() for e in range(0, nbytes, order.element)}
        if order.reads:
            acquire = order.sem in ("acquire", "acq_rel")
            for key in keys:
                for (cta, scope), vc in self.locations.get(key, {}).items():
                    scope = min(scope, order.scope)
                    if not covers(scope, cta, agent.cta):
                        continue  # not morally strong: no synchronization
                    if acquire:
                        join(agent.vc, vc)
                    else:  # an acquire fence later in program order completes the pattern
                        join(agent.observed.setdefault((cta, scope), {}), vc)
        if order.writes:
            released = {scope: vc for scope, vc in agent.released.items()}  # release fences before this write
            if order.sem in ("release", "acq_rel"):
                released[order.scope] = dict(agent.vc)
            for key in keys:
                self._publish(agent, key, released, order)
            if order.sem in ("release", "acq_rel"):
                agent.tick()

    def _publish(self, agent: Agent, key, released: dict, order) -> None:
        """A strong write of `key` by `agent`: an atomic one continues the location's release sequence (what
        others released stays, where this operation's scope includes them); any other starts a new one. The
        write adds what `agent` releases with it ({scope: vector clock})."""
        sequence = {}
        if order.atomic:
            sequence = {k: vc for k, vc in self.locations.get(key, {}).items()
                        if covers(min(k[1], order.scope), k[0], agent.cta)}
        for scope, vc in released.items():
            k = (agent.cta, min(scope, order.scope))
            if k in sequence:
                merged = dict(sequence[k])
                join(merged, vc)
                sequence[k] = merged
            else:
                sequence[k] = vc
        self.locations[key] = sequence

    # ------------------------------------------------------------------ mbarriers
    def _barrier(self, barrier) -> list:
        state = self.barrier_state.get(id(barrier))
        if state is None:
            state = self.barrier_state[id(barrier)] = [{}, {}, None]
        return state

    def mbarrier_init(self, w, barrier) -> None:
        agent = self.warp(w)
        state = self._barrier(barrier)
        state[0], state[1] = {}, {}
        state[2] = (agent.id, agent.vc[agent.id], self._desc(agent.id, w.last_index))

    def arrive(self, w, barrier) -> None:
        """Warp `w` arrives on (or completes tx of) `barrier`: a release."""
        agent = self.warp(w)
        if barrier.address >> 24 != w.cta.rank:
            self._init_check(barrier, Access(agent.id, agent.vc[agent.id], agent.vc,
                                             self._desc(agent.id, w.last_index), False), "a remote arrive")
        join(self._barrier(barrier)[0], agent.vc)
        agent.tick()

    def signal(self, barrier) -> None:
        """The executing asynchronous operation signals `barrier` (complete-tx, tcgen05.commit's arrive)."""
        access = self.stack[-1] if self.stack else None
        if access is None:
            return
        self._init_check(barrier, access, "an asynchronous unit's signal")
        join(self._barrier(barrier)[0], access.vc)

    def phase_complete(self, barrier) -> None:
        state = self._barrier(barrier)
        join(state[1], state[0])
        state[0] = {}

    def observe(self, w, barrier) -> None:
        """A wait of `w` found a phase of `barrier` complete: an acquire."""
        join(self.warp(w).vc, self._barrier(barrier)[1])

    def _init_check(self, barrier, access: Access, what: str) -> None:
        init = self._barrier(barrier)[2]
        if init is None:
            return
        agent_id, clock, desc = init
        agent = self.agents[agent_id]
        seen = access.vc.get(agent_id, 0)
        if seen < clock and agent_id != access.id:
            self._report(f"mbarrier at shared 0x{barrier.address:x}", ("mbarrier.init", desc), (what, access.desc),
                         "the signal is not ordered after the barrier's initialization")
        i = bisect_left(agent.init_fences, clock)
        if not (i < len(agent.init_fences) and agent.init_fences[i] <= seen):
            self._report(f"mbarrier at shared 0x{barrier.address:x}", ("mbarrier.init", desc), (what, access.desc),
                         f"{agent.label} executed no fence.mbarrier_init between the init and this signal "
                         "(PTX ISA 9.7.13.15.9: the async proxy and other CTAs see an mbarrier's "
                         "initialization only through it)")

    # ------------------------------------------------------------------ CTA and cluster barriers
    def bar_arrive(self, w, barrier, waits: bool) -> None:
        agent = self.warp(w)
        state = self.named.setdefault(id(barrier), [{}, []])
        join(state[0], agent.vc)
        agent.tick()
        if waits:
            state[1].append(agent)

    def bar_complete(self, barrier) -> None:
        vc, waiting = self.named.pop(id(barrier), [{}, []])
        for agent in waiting:
            join(agent.vc, vc)

    def cluster_arrive(self, w, barrier, generation: int) -> None:
        agent = self.warp(w)
        join(self.cluster.setdefault((id(barrier), generation), [{}, [], False])[0], agent.vc)
        agent.tick()

    def cluster_wait(self, w, barrier, generation: int) -> None:
        state = self.cluster.setdefault((id(barrier), generation), [{}, [], False])
        if state[2]:
            join(self.warp(w).vc, state[0])
        else:
            state[1].append(self.warp(w))

    def cluster_complete(self, barrier, generation: int) -> None:
        state = self.cluster.setdefault((id(barrier), generation), [{}, [], False])
        state[2] = True
        for agent in state[1]:
            join(agent.vc, state[0])
        state[1] = []

    def bulk_wait(self, w, accesses) -> None:
        """cp.async.bulk.wait_group: the groups waited for are complete (their reads and writes)."""
        agent = self.warp(w)
        for access in accesses:
            join(agent.vc, access.vc)

    # ------------------------------------------------------------------ CTA exit
    def cta_exit(self, cta) -> None:
        """The last warp of `cta` exited: its shared memory ends (PTX ISA 5.1, Table 6: `.shared` is
        accessible "throughout the lifetime of the CTA that defines it"), written, as it were, by what every
        warp of the CTA had seen at its exit. An asynchronous unit still to read or write it (a TMA store no
        `cp.async.bulk.wait_group.read` waited for, a load or MMA no barrier wait ordered before the exit) is
        then unordered with that write: a race, reported at this write or at the unit's later access."""
        agent = self._new_agent(f"{cta.label} exit (its shared memory is released)", cta)
        for w in cta.warps:
            join(agent.vc, self.warp(w).vc)
        desc = len(self.descs)
        self.descs.append((agent.id, "the CTA's last warp exited"))
        self._shared_granules(cta.shared, slice(0, cta.shared.size // GRANULE),
                              Access(agent.id, agent.vc[agent.id], agent.vc, desc, False), True)

    # ------------------------------------------------------------------ reports
    def _missing(self, access: Access, agent_id: int, clock: int, earlier_scope: int = 0) -> str:
        other = self.agents[agent_id].label
        text = (f"no happens-before order: the later agent has seen {other} up to its clock "
                f"{access.vc.get(agent_id, 0)}, the earlier access is at clock {clock} (no barrier, mbarrier phase, "
                "commit, bulk wait or release/acquire pattern orders them)")
        if earlier_scope and access.scope:
            text += ("; both accesses are strong, but not morally strong: the scope of one does not include the "
                     "other's thread (PTX ISA 8.7)")
        return text

    def _report(self, where: str, earlier: tuple, later: tuple, missing: str) -> None:
        def side(kind, desc):
            agent_id, text = self.descs[desc]
            return f"{kind} by {self.agents[agent_id].label} at {text}"

        raise RaceError(f"{side(*earlier)}; then {side(*later)}: {missing}", where)


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
