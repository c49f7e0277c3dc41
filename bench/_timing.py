"""Timing and peak-memory helpers shared by the benchmark scripts (``bench_core.py``,
``bench_adjusted.py``): best/median wall time, the printed row, and the resident-set high-water
mark of one call measured in a fresh subprocess (``VmHWM`` in ``/proc/self/status``, reset
through ``/proc/self/clear_refs``), and that subprocess's ``--memory-child n strata`` option."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(best, median) wall time over ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def line(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<58} {value:>14}  {note}")


def status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as fh:
        for row in fh:
            if row.startswith(field + ":"):
                return int(row.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_rise(
    fn: Callable[[], object], input_bytes: int, traced: bool = False
) -> dict[str, object]:
    """Reset the high-water mark to the current RSS, call ``fn`` once, and return the rise of
    ``VmHWM`` in bytes (``peak_rise``), with ``input_bytes``, ``rss_before``, whether the reset
    worked and, with ``traced``, tracemalloc's peak (the numpy-visible part) as ``traced_peak``."""
    import tracemalloc

    with open("/proc/self/clear_refs", "w") as fh:  # reset VmHWM to the current RSS
        fh.write("5")
    rss0 = status_kb("VmRSS")
    hwm0 = status_kb("VmHWM")
    if traced:
        tracemalloc.start()
    fn()
    out: dict[str, object] = {}
    if traced:
        _, out["traced_peak"] = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    hwm1 = status_kb("VmHWM")
    return {
        "input_bytes": input_bytes,
        "rss_before": rss0 * 1024,
        "hwm_reset_ok": hwm0 <= rss0 + 1024,
        "peak_rise": (hwm1 - rss0) * 1024,
        **out,
    }


def parse_or_run_child(
    parser: argparse.ArgumentParser, memory_child: Callable[[int, int], None]
) -> argparse.Namespace | None:
    """The script's arguments; or, when :func:`memory_child_result` started it with
    ``--memory-child n strata``, ``memory_child(n, strata)`` run and None (the script stops)."""
    parser.add_argument("--memory-child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(*args.memory_child)
        return None
    return args


def memory_child_result(script: str, n: int, strata: int) -> dict:
    """Run ``script --memory-child n strata`` in a fresh process; its last line, as JSON."""
    out = subprocess.run(
        [sys.executable, script, "--memory-child", str(n), str(strata)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def print_peak(m: dict, digits: int) -> None:
    """The input-size and peak-rise rows of a :func:`peak_rise` result (MiB, ``digits`` after the
    point for the rise)."""
    mb = 1 / 2**20
    line("input arrays (w int8 + y float64 + x int64)", f"{m['input_bytes'] * mb:.0f} MiB")
    line("peak RSS rise during the release (VmHWM)", f"{m['peak_rise'] * mb:.{digits}f} MiB",
         "" if m["hwm_reset_ok"] else "(VmHWM reset failed: figure is an upper bound)")  # fmt: skip
