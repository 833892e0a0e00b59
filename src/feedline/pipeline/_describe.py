"""How a pipeline prints: its source and steps, one a line, and what runs it once it has run."""

from __future__ import annotations

from .._process_tuning import describe as describe_process_tuning

__all__ = ["describe"]


def describe(source, steps, runtime) -> str:
    """``print(pipe)``: the source, each step as the method call that added it, then the runtime's settings if running."""
    lines = [source.describe()]
    lines += ["  ." + step.describe() for step in steps]
    if runtime is not None and not runtime.closed:
        lines.append(f"  # running: backend={runtime.backend} workers={runtime.workers} prefetch={runtime.depth} ({runtime.decision})")
    if (tuning := describe_process_tuning()) is not None:
        lines.append("  " + tuning)
    return "\n".join(lines)
