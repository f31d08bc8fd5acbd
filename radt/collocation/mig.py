"""MIG: check the slices fit, create exactly them, find their UUIDs, destroy exactly them.

**Where slices go.** A MIG GPU has 8 memory slices and 7 compute slices
(A30: 4 and 4). A GPU-instance profile takes a power of two of memory slices
and sits at a start that is a multiple of that size, its compute slices
included: on an A100-40GB ``1g.5gb`` may start at 0-6, ``1g.10gb`` at 0, 2, 4, 6,
``2g.10gb`` at 0, 2, 4, ``3g.20gb`` at 0, 4, and ``4g.20gb`` / ``7g.40gb`` at 0 only;
the same rule gives the H100/A30 tables of NVIDIA's MIG user guide. The size
comes from the profile's memory in ``nvidia-smi mig -lgip`` (relative to the
smallest profile), the slices in use from the ``Start:Size`` column of
``-lgi``. :func:`arrange` searches placements for all requested profiles
around the instances already there, and setup creates each instance at the
start found, with the profile tuple ``-cgi <id>:<start> -C`` (nvidia-smi
R470 and later); an nvidia-smi that does not take the ``:<start>`` form is
asked again without it and places the instance itself (largest first).

**Which MIG UUID is which instance.** R450/R460 drivers print
``MIG-GPU-<gpu uuid>/<gi>/<ci>``: the ids are in the UUID. Later drivers
print ``MIG-<uuid>`` with no ids; ``nvidia-smi -L`` lists a GPU's MIG devices
in NVML's order, by GPU-instance id and then compute-instance id (as both
captured listings in tests/fixtures show), so the k-th MIG device is the k-th
compute instance of ``-lci`` sorted that way. That is used when the counts
and profile names agree line by line; otherwise the MIG devices that were not
there before creation are matched by profile name (with a warning: two
instances of the same profile may then be swapped, which changes nothing for
the runs but the ``radt.mig_instance`` tag).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from radt.collocation import nvsmi
from radt.collocation.common import SlotRequest, mig_mode
from radt.collocation.teardown import Teardown
from radt.errors import RadtError
from radt.placeholders import is_placeholder

SMI = nvsmi.SMI


# --------------------------------------------------------------------------- placement model


@dataclass(frozen=True)
class Layout:
    """How one GPU's MIG slices are laid out, derived from ``mig -lgip``."""

    memory_slices: int
    compute_slices: int
    sizes: dict[int, int]  # profile id -> memory slices

    def placements(self, profile: nvsmi.GiProfile) -> list[int]:
        size = self.sizes[profile.id]
        return [
            start
            for start in range(0, self.memory_slices - size + 1, size)
            if start + max(profile.compute_slices, 1) <= self.compute_slices
        ]


def layout_of(profiles: list[nvsmi.GiProfile]) -> Layout:
    positive = [p.memory_gib for p in profiles if p.memory_gib > 0]
    smallest = min(positive) if positive else 1.0
    sizes = {
        p.id: 2 ** max(0, round(math.log2(p.memory_gib / smallest))) if p.memory_gib > 0 else 1
        for p in profiles
    }
    memory = max(sizes.values(), default=8)
    compute = max((p.compute_slices for p in profiles), default=7)
    return Layout(memory, compute, sizes)


def arrange(
    layout: Layout, existing: list[nvsmi.GpuInstance], wanted: list[nvsmi.GiProfile]
) -> list[int] | None:
    """A start for each wanted profile (same order), around ``existing``; None if none fits."""
    busy: set[int] = set()
    for gi in existing:
        busy |= set(range(gi.start, gi.start + gi.size))
    order = creation_order(layout, wanted)
    starts: list[int | None] = [None] * len(wanted)

    def place(pos: int) -> bool:
        if pos == len(order):
            return True
        k = order[pos]
        size = layout.sizes[wanted[k].id]
        for start in layout.placements(wanted[k]):
            cells = set(range(start, start + size))
            if cells & busy:
                continue
            busy.update(cells)
            starts[k] = start
            if place(pos + 1):
                return True
            busy.difference_update(cells)
        return False

    return [s for s in starts if s is not None] if place(0) else None


def creation_order(layout: Layout, wanted: list[nvsmi.GiProfile]) -> list[int]:
    """Indices of ``wanted``, largest first (the order instances are created in)."""
    return sorted(
        range(len(wanted)),
        key=lambda k: (-layout.sizes[wanted[k].id], -wanted[k].compute_slices, k),
    )


def find_profile(name: str, profiles: list[nvsmi.GiProfile]) -> nvsmi.GiProfile | None:
    """The profile a plan names: ``3g.20gb``, ``MIG 3g.20gb`` or its id ``9``."""
    text = name.strip().lower()
    text = text[4:].strip() if text.startswith("mig ") else text
    for profile in profiles:
        if profile.name.lower() == text or (text.isdigit() and profile.id == int(text)):
            return profile
    return None


# --------------------------------------------------------------------------- reading the GPU


@dataclass
class GpuMig:
    """What ``-lgip`` and ``-lgi`` say about one GPU."""

    profiles: list[nvsmi.GiProfile]
    existing: list[nvsmi.GpuInstance]

    @property
    def layout(self) -> Layout:
        return layout_of(self.profiles)

    def offers(self) -> str:
        names: list[str] = []
        for p in self.profiles:
            if p.name not in names:
                names.append(p.name)
        return ", ".join(names)


def read_gpu(index: int) -> GpuMig:
    """``mig -lgip`` and ``mig -lgi`` of GPU ``index``; RadtError when they fail."""
    lgip = nvsmi.run([SMI, "mig", "-i", str(index), "-lgip"])
    if not lgip.ok:
        raise RadtError(f"`{lgip.command}` failed: {lgip.summary()}")
    profiles = [p for p in nvsmi.parse_lgip(lgip.output) if p.gpu == index]
    if not profiles:
        raise RadtError(f"`{lgip.command}` lists no GPU instance profile")
    lgi = nvsmi.run([SMI, "mig", "-i", str(index), "-lgi"])
    if lgi.ok:
        existing = [gi for gi in nvsmi.parse_lgi(lgi.output) if gi.gpu == index]
    elif "No GPU instances found" in lgi.output:
        existing = []
    else:
        raise RadtError(f"`{lgi.command}` failed: {lgi.summary()}")
    return GpuMig(profiles, existing)


# --------------------------------------------------------------------------- check


def mode_problem(gpu: nvsmi.GpuListing) -> str | None:
    """Why MIG cannot be used on ``gpu`` now (the message tail), or None."""
    n = gpu.index
    mode = mig_mode(n)
    if mode is None:
        return None  # the -lgip call that follows reports what is wrong
    current, pending = mode
    if current == "Enabled":
        return None
    if is_placeholder(current):
        if current.strip("[] ").lower() in ("n/a", "not supported"):
            return f"GPU {n} ({gpu.name}) does not support MIG"
        return (
            f"nvidia-smi cannot read the MIG mode of GPU {n} ({gpu.name}): it says {current}; "
            f"check the GPU with `nvidia-smi -q -i {n}` before running MIG workloads on it"
        )
    if pending == "Enabled":
        return (
            f"MIG mode on GPU {n} ({gpu.name}) is switched on but not active yet (pending); "
            f"reset the GPU with no process on it (`sudo nvidia-smi -i {n} -r`) or reboot"
        )
    return (
        f"MIG mode is off on GPU {n} ({gpu.name}) and radT never switches it on by itself; "
        f"someone with root can run `sudo nvidia-smi -i {n} -mig 1` while no process uses "
        f"the GPU (a GPU reset, `sudo nvidia-smi -i {n} -r`, or a reboot may be needed "
        "before it takes effect)"
    )


def check_gpu(
    gpu: nvsmi.GpuListing, requests: list[SlotRequest], where: Callable[[list[int]], str]
) -> list[str]:
    """Problems of the MIG rows on one GPU; changes nothing."""
    lines = [r.line for r in requests]
    problem = mode_problem(gpu)
    if problem:
        return [f"{where(lines)}: {problem}"]
    try:
        state = read_gpu(gpu.index)
    except RadtError as exc:
        return [f"{where(lines)}: {exc}"]
    problems = []
    wanted: list[tuple[SlotRequest, nvsmi.GiProfile]] = []
    for request in requests:
        profile = find_profile(request.mig_profile or "", state.profiles)
        if profile is None:
            problems.append(
                f"{where([request.line])}: MIG profile {request.mig_profile} does not exist on "
                f"GPU {gpu.index} ({gpu.name}); it offers {state.offers()}"
            )
        else:
            wanted.append((request, profile))
    if problems or not wanted:
        return problems
    problem = fit_problem(gpu, state, [p for _r, p in wanted])
    if problem:
        problems.append(f"{where([r.line for r, _p in wanted])}: {problem}")
    return problems


def fit_problem(gpu: nvsmi.GpuListing, state: GpuMig, wanted: list[nvsmi.GiProfile]) -> str | None:
    """Why ``wanted`` cannot all be created on ``gpu`` next to what is there, or None."""
    layout = state.layout
    names = " + ".join(p.name for p in wanted)
    held = ""
    if state.existing:
        held = "; it already holds " + ", ".join(
            f"{gi.name} (GPU instance {gi.id} at {gi.start}:{gi.size})" for gi in state.existing
        )
    used = sum(
        next((p.compute_slices for p in state.profiles if p.id == gi.profile_id), 0)
        for gi in state.existing
    )
    need = sum(p.compute_slices for p in wanted)
    free = max(layout.compute_slices - used, 0)
    many = "slice" if need == 1 else "slices"
    if need > free:
        return (
            f"MIG profiles {names} need {need} compute {many} together, but GPU {gpu.index} "
            f"({gpu.name}) has {free} free of {layout.compute_slices}{held}"
        )
    for profile, count in Counter(wanted).items():
        if count > profile.free:
            return (
                f"MIG profiles {names} ask for {count} x {profile.name}, but GPU {gpu.index} "
                f"({gpu.name}) has room for {profile.free} more (at most {profile.total}){held}"
            )
    if arrange(layout, state.existing, wanted) is None:
        return (
            f"MIG profiles {names} cannot be placed side by side on GPU {gpu.index} "
            f"({gpu.name}): MIG instances sit at fixed positions, and these leave no room "
            f"for each other{held}"
        )
    return None


# --------------------------------------------------------------------------- setup


@dataclass
class Made:
    """One instance radT created for one request."""

    request: SlotRequest
    profile: nvsmi.GiProfile
    gi: int
    ci: int
    uuid: str = ""
    placement: str = ""


def setup_gpu(
    gpu: nvsmi.GpuListing,
    requests: list[SlotRequest],
    teardown: Teardown,
    warn: Callable[[str], None],
    where: Callable[[list[int]], str],
) -> tuple[list[Made], str]:
    """Create one GPU instance (with its default compute instance) per request.

    An undo step is registered for each instance right after it exists. Returns
    what was made (same order as ``requests``) and the placement artifact text.
    """
    n = gpu.index
    lines = [r.line for r in requests]
    problem = mode_problem(gpu)
    if problem:
        raise RadtError(f"{where(lines)}: {problem}")
    state = read_gpu(n)
    profiles = []
    for request in requests:
        profile = find_profile(request.mig_profile or "", state.profiles)
        if profile is None:
            raise RadtError(
                f"{where([request.line])}: MIG profile {request.mig_profile} does not exist on "
                f"GPU {n} ({gpu.name}); it offers {state.offers()}"
            )
        profiles.append(profile)
    problem = fit_problem(gpu, state, profiles)
    starts = arrange(state.layout, state.existing, profiles)
    if problem or starts is None:
        raise RadtError(f"{where(lines)}: {problem or 'MIG profiles do not fit'}")
    before = {m.uuid for g in nvsmi.parse_list(_list_text()) if g.index == n for m in g.migs}

    made: list[Made | None] = [None] * len(requests)
    with_start = True
    for k in creation_order(state.layout, profiles):
        request, profile = requests[k], profiles[k]
        tuple_ = f"{profile.id}:{starts[k]}" if with_start else str(profile.id)
        result = _create(n, tuple_, teardown)
        if with_start and "Invalid combination of input arguments" in result.output:
            with_start = False
            warn(
                "this nvidia-smi does not take a placement in -cgi (profile:start); "
                "it places the MIG instances itself"
            )
            result = _create(n, str(profile.id), teardown)
        created = nvsmi.parse_created(result.output)
        gis = [c for c in created if c.ci is None and c.gpu == n]
        cis = [c for c in created if c.ci is not None and c.gpu == n]
        if not result.ok or len(gis) != 1 or len(cis) != 1:
            raise RadtError(
                f"{where([request.line])}: creating MIG instance {profile.name} on GPU {n} "
                f"failed: {result.summary()}"
            )
        made[k] = Made(request, profile, gis[0].gi, cis[0].ci or 0)

    done = [m for m in made if m is not None]
    listing = nvsmi.parse_list(_list_text())
    here = next((g for g in listing if g.index == n), None)
    lci = nvsmi.run([SMI, "mig", "-i", str(n), "-lci"])
    lgi = nvsmi.run([SMI, "mig", "-i", str(n), "-lgi"])
    if here is None or not lci.ok:
        raise RadtError(
            f"{where(lines)}: cannot list the new MIG devices of GPU {n}: "
            f"{lci.summary() if not lci.ok else 'nvidia-smi -L does not list the GPU'}"
        )
    all_cis = [c for c in nvsmi.parse_lci(lci.output) if c.gpu == n]
    wanted = [(m.gi, m.ci, _ci_name(all_cis, m)) for m in done]
    uuids, how = map_uuids(here, all_cis, wanted, before)
    if how.startswith("fallback"):
        warn(f"GPU {n}: {how}")
    placements = {gi.id: f"{gi.start}:{gi.size}" for gi in nvsmi.parse_lgi(lgi.output)}
    for m in done:
        m.uuid = uuids[(m.gi, m.ci)]
        m.placement = placements.get(m.gi, "?")
    return done, _artifact(gpu, done, how, lgi, lci)


def _create(n: int, profile_tuple: str, teardown: Teardown) -> nvsmi.ToolResult:
    """``mig -cgi <tuple> -C``; registers undo steps for whatever it reports created."""
    result = nvsmi.run(
        [SMI, "mig", "-i", str(n), "-cgi", profile_tuple, "-C"],
        timeout=nvsmi.MIG_TIMEOUT_S,
        critical=True,
    )
    for c in nvsmi.parse_created(result.output):
        if c.ci is None:
            teardown.add(
                f"destroy MIG GPU instance {c.gi} on GPU {c.gpu}",
                lambda gpu=c.gpu, gi=c.gi: destroy_gi(gpu, gi),
            )
        else:
            teardown.add(
                f"destroy MIG compute instance {c.ci} of GPU instance {c.gi} on GPU {c.gpu}",
                lambda gpu=c.gpu, gi=c.gi, ci=c.ci: destroy_ci(gpu, gi, ci),
            )
    result.reraise()
    return result


def destroy_ci(gpu: int, gi: int, ci: int) -> None:
    result = nvsmi.run(
        [SMI, "mig", "-i", str(gpu), "-dci", "-gi", str(gi), "-ci", str(ci)],
        timeout=nvsmi.MIG_TIMEOUT_S,
    )
    if not result.ok:
        raise RadtError(f"`{result.command}`: {result.summary()}")


def destroy_gi(gpu: int, gi: int) -> None:
    result = nvsmi.run(
        [SMI, "mig", "-i", str(gpu), "-dgi", "-gi", str(gi)], timeout=nvsmi.MIG_TIMEOUT_S
    )
    if not result.ok:
        raise RadtError(f"`{result.command}`: {result.summary()}")


def _list_text() -> str:
    result = nvsmi.run([SMI, "-L"])
    if not result.ok:
        raise RadtError(f"`nvidia-smi -L` failed: {result.summary()}")
    return result.output


def _ci_name(cis: list[nvsmi.ComputeInstance], made: Made) -> str:
    return next((c.name for c in cis if (c.gi, c.id) == (made.gi, made.ci)), made.profile.name)


# --------------------------------------------------------------------------- MIG UUIDs


def map_uuids(
    gpu: nvsmi.GpuListing,
    cis: list[nvsmi.ComputeInstance],
    wanted: list[tuple[int, int, str]],
    before: set[str],
) -> tuple[dict[tuple[int, int], str], str]:
    """The MIG UUID of each wanted (GPU instance, compute instance, profile name).

    ``gpu`` is the GPU's entry in ``nvidia-smi -L``, ``cis`` every compute
    instance of that GPU (``mig -lci``), ``before`` the MIG UUIDs listed before
    radT created anything. Returns the mapping and how it was found; raises
    RadtError when a wanted instance has no MIG device.
    """
    keys = [(gi, ci) for gi, ci, _name in wanted]
    old_style = {}
    for mig in gpu.migs:
        ids = nvsmi.r450_ids(mig.uuid)
        if ids is not None and ids[0].lower() == gpu.uuid.lower():
            old_style[(ids[1], ids[2])] = mig.uuid
    if keys and all(k in old_style for k in keys):
        return {k: old_style[k] for k in keys}, "R450 MIG UUIDs carry the instance ids"

    migs = sorted(gpu.migs, key=lambda m: m.index)
    ordered = sorted(cis, key=lambda c: (c.gi, c.id))
    if len(migs) == len(ordered) and all(
        m.name.lower() == c.name.lower() for m, c in zip(migs, ordered, strict=True)
    ):
        by_ids = {(c.gi, c.id): m.uuid for c, m in zip(ordered, migs, strict=True)}
        if all(k in by_ids and by_ids[k] not in before for k in keys):
            return (
                {k: by_ids[k] for k in keys},
                "nvidia-smi -L lists MIG devices by GPU instance id, then compute instance id",
            )

    fresh = [m for m in migs if m.uuid not in before]
    found: dict[tuple[int, int], str] = {}
    for gi, ci, name in sorted(wanted):
        match = next((m for m in fresh if m.name.lower() == name.lower()), None)
        if match is None:
            raise RadtError(
                f"cannot find the MIG device of GPU instance {gi} (compute instance {ci}, "
                f"{name}) of GPU {gpu.index} in nvidia-smi -L"
            )
        fresh.remove(match)
        found[(gi, ci)] = match.uuid
    return found, (
        "fallback: nvidia-smi -L does not line up with mig -lci; the new MIG devices "
        "were matched by profile name (same-profile instances may be swapped)"
    )


def _artifact(
    gpu: nvsmi.GpuListing, made: list[Made], how: str, lgi: nvsmi.ToolResult, lci: nvsmi.ToolResult
) -> str:
    rows = [
        f"GPU {gpu.index}: {gpu.name} ({gpu.uuid}): MIG instances created by radT",
        f"{'line':<6}{'run':<5}{'profile':<12}{'GI':>4}{'CI':>4}  {'placement':<11}MIG device",
    ]
    for m in made:
        rows.append(
            f"{m.request.line:<6}{m.request.letter:<5}{m.profile.name:<12}{m.gi:>4}{m.ci:>4}  "
            f"{m.placement:<11}{m.uuid}"
        )
    rows.append(f"(UUIDs: {how})")
    rows += ["", f"$ {lgi.command}", lgi.output.rstrip(), "", f"$ {lci.command}"]
    rows.append(lci.output.rstrip())
    return "\n".join(rows) + "\n"
