"""This process's CPUs and CPU time, and the machine's (for /varz and the busy poller)."""

from __future__ import annotations

import os

try:
    _TICKS = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
    _TICKS = 100


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, as a container limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def own_cpu_seconds() -> float:
    """This process's CPU seconds (all its threads)."""
    times = os.times()
    return times.user + times.system


def machine_busy_seconds() -> float | None:
    """CPU seconds the machine's CPUs have been busy (/proc/stat: all but idle and iowait,
    steal included: time the hypervisor gave to others); None where there is no /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICKS
