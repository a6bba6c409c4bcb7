"""Peers' entries in the emulator: which route runs a given submission file.

A route is a module with `KIND` (what it runs, in words), `recognizes(source_text) -> bool` and
`make_case(path, source_text, spec, **options)` (options: `row`, `seed_shift`, `repairs`), the case following
tools/emulate.py's `run_example_calls` protocol (`compiled`, `args`, `register`, `with_inputs`, `compare`,
`warp_roles`, `seed`, and a one-line `note`). `route_for` takes the first route that recognizes the file: a CUDA
C++ entry compiled with torch's load_inline (peer_cuda), a CuTe DSL entry with its own custom_kernel (peer_dsl).

    python tools/emulate.py peer --source FILE --spec SPEC [--time] [--calls N] ...
"""

from __future__ import annotations

import importlib

ROUTES = ("peer_cuda", "peer_dsl")  # modules of this package, tried in order


def route_for(source_text: str):
    """The route module that runs this file, or None."""
    for name in ROUTES:
        module = importlib.import_module(f"{__package__}.{name}")
        if module.recognizes(source_text):
            return module
    return None


def kinds() -> str:
    """What the routes recognize, for a refusal's message."""
    return ", ".join(importlib.import_module(f"{__package__}.{name}").KIND for name in ROUTES)
