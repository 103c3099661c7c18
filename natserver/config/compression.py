"""``compression`` of routes (``cluster {}``) and leaf node connections (``leafnodes {}`` and
each remote), as nats-server 2.15.1 configures and negotiates it (server.go
CompressionOpts, validateAndNormalizeCompressionOption, selectCompressionMode,
selectS2AutoModeBasedOnRTT; opts.go parseCompression and setBaselineOptions).

A mode is one of the names below. ``on`` (``enabled``, ``true``) is ``s2_fast`` for routes
and ``s2_auto`` for leaf nodes; ``s2_auto`` picks ``s2_uncompressed``, ``s2_fast``,
``s2_better`` or ``s2_best`` from the connection's RTT and ``rtt_thresholds``. Both sides
send their mode in their first INFO; each then writes with the level the selection gives it
(compression is asymmetric).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.gotext import go_duration, go_duration_error, go_type_name

__all__ = [
    "CompressionError", "CompressionOpts", "NOT_SUPPORTED", "OFF", "ACCEPT", "S2_AUTO", "S2_UNCOMPRESSED", "S2_FAST",
    "S2_BETTER", "S2_BEST", "ROUTE_DEFAULT", "LEAF_DEFAULT", "needs_compression", "normalize",
    "select_mode", "mode_for_info", "select_auto_by_rtt",
]

# server.go's compression modes.
NOT_SUPPORTED = "not supported"
OFF = "off"
ACCEPT = "accept"
S2_AUTO = "s2_auto"
S2_UNCOMPRESSED = "s2_uncompressed"
S2_FAST = "s2_fast"
S2_BETTER = "s2_better"
S2_BEST = "s2_best"

# server.go defaultCompressionS2AutoRTTThresholds (seconds): up to 10 ms uncompressed, up to
# 50 ms fast, up to 100 ms better, above best.
DEFAULT_RTT_THRESHOLDS = (0.010, 0.050, 0.100)
# s2_auto's levels, one per threshold (selectS2AutoModeBasedOnRTT).
_AUTO_LEVELS = (S2_UNCOMPRESSED, S2_FAST, S2_BETTER, S2_BEST)
# opts.go: "on" means s2_fast in cluster {} (parseCluster) and s2_auto for leaf nodes.
ROUTE_ON = S2_FAST
LEAF_ON = S2_AUTO


class CompressionError(ValueError):
    """A ``compression`` value nats-server refuses; ``key``: the member at fault (its place
    is where nats-server reports it), None for the value itself."""

    def __init__(self, text: str, key: str | None = None) -> None:
        super().__init__(text)
        self.key = key


@dataclass(frozen=True, slots=True)
class CompressionOpts:
    """opts.go CompressionOpts: the mode and, for s2_auto, the RTT thresholds (seconds)."""

    mode: str
    rtt_thresholds: tuple[float, ...] = ()


# opts.go setBaselineOptions: routes default to "accept" (compress when the peer asks), leaf
# nodes (the listener and each remote) to "s2_auto".
ROUTE_DEFAULT = CompressionOpts(ACCEPT)
LEAF_DEFAULT = CompressionOpts(S2_AUTO, DEFAULT_RTT_THRESHOLDS)


def parse(value, chosen_for_on: str, parse_duration) -> CompressionOpts:
    """opts.go parseCompression: a string, a boolean or ``{mode, rtt_thresholds}``, as
    written (``normalize`` checks the mode when the server starts, as server.go does);
    CompressionError with nats-server's text."""
    mode = ""
    rtts: list[float] = []
    if isinstance(value, bool):
        mode = chosen_for_on if value else OFF
    elif isinstance(value, str):
        mode = value
    elif isinstance(value, dict):
        for key, item in value.items():
            lowered = key.lower()
            if lowered == "mode":
                if not isinstance(item, str):
                    raise CompressionError(f"interface conversion: interface {{}} is {go_type_name(item)}, not string",
                                           key)
                mode = item
            elif lowered in ("rtt_thresholds", "thresholds", "rtts", "rtt"):
                if not isinstance(item, list):  # (Go's failed type assertion, as the error)
                    raise CompressionError(
                        f"interface conversion: interface {{}} is {go_type_name(item)}, not []interface {{}}", key)
                for threshold in item:
                    if not isinstance(threshold, str):
                        raise CompressionError(
                            f"interface conversion: interface {{}} is {go_type_name(threshold)}, not string", key)
                    try:
                        rtts.append(parse_duration(threshold))
                    except ValueError:
                        raise CompressionError(go_duration_error(threshold), key) from None
            else:
                raise CompressionError(f'unknown field "{key}"', key)
    else:
        raise CompressionError(f'field "compression" should be a boolean or a structure, got {go_type_name(value)}')
    return CompressionOpts(mode, tuple(rtts))


def normalize(opts: CompressionOpts, chosen_for_on: str) -> CompressionOpts:
    """server.go validateAndNormalizeCompressionOption."""
    lowered = opts.mode.lower()
    if lowered in ("on", "enabled", "true"):
        lowered = chosen_for_on
    if lowered in ("not supported", "not_supported"):
        return CompressionOpts(NOT_SUPPORTED)
    if lowered in ("disabled", "off", "false"):
        return CompressionOpts(OFF)
    if lowered == "accept":
        return CompressionOpts(ACCEPT)
    if lowered in ("fast", "s2_fast"):
        return CompressionOpts(S2_FAST)
    if lowered in ("better", "s2_better"):
        return CompressionOpts(S2_BETTER)
    if lowered in ("best", "s2_best"):
        return CompressionOpts(S2_BEST)
    if lowered not in ("auto", "s2_auto"):
        raise ValueError(f"unsupported compression mode {_go_quote(opts.mode)}")
    if not opts.rtt_thresholds:
        return CompressionOpts(S2_AUTO, DEFAULT_RTT_THRESHOLDS)
    rtts: list[float] = []
    shown = "[" + " ".join(go_duration(r) for r in opts.rtt_thresholds) + "]"
    for n in opts.rtt_thresholds:
        n = max(n, 0.0)  # negative is taken as 0 (that level unused)
        if rtts and n != 0 and any(n < v for v in rtts):
            raise ValueError(f"RTT threshold values {shown} should be in ascending order")
        rtts.append(n)
    while rtts and rtts[-1] == 0:
        rtts.pop()
    if len(rtts) > len(_AUTO_LEVELS):
        raise ValueError(f"compression mode {_go_quote(opts.mode)} should have no more than 4 RTT thresholds: {shown}")
    if not rtts:
        raise ValueError(f"compression mode {_go_quote(opts.mode)} requires at least one RTT threshold")
    return CompressionOpts(S2_AUTO, tuple(rtts))


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def needs_compression(mode: str) -> bool:
    """server.go needsCompression: whether this mode negotiates with the peer."""
    return mode not in ("", OFF, NOT_SUPPORTED)


def select_mode(ours: str, theirs) -> str:
    """server.go selectCompressionMode: what this side writes with, given its mode (not off
    or not supported) and the one the peer's INFO gave (absent: a server without
    compression); ValueError for a mode it does not know."""
    if not theirs or theirs == NOT_SUPPORTED:
        return NOT_SUPPORTED
    if theirs == OFF:
        return OFF
    if theirs == ACCEPT:
        return OFF if ours == ACCEPT else ours
    if theirs in _AUTO_LEVELS or theirs == S2_AUTO:
        if ours == ACCEPT:
            return S2_FAST if theirs == S2_AUTO else theirs
        return ours
    raise ValueError(f"unsupported route compression mode {_go_quote(str(theirs))}")


def mode_for_info(opts: CompressionOpts, chosen: str) -> str:
    """server.go compressionModeForInfoProtocol: an s2_auto side says s2_auto, whatever level
    it picked."""
    return S2_AUTO if opts.mode == S2_AUTO else chosen


def select_auto_by_rtt(rtt: float, thresholds: tuple[float, ...]) -> str:
    """server.go selectS2AutoModeBasedOnRTT: the level of the first threshold ``rtt`` is not
    above (0 thresholds never match); beyond them, best (or the last level there is)."""
    for index, threshold in enumerate(thresholds):
        if rtt <= threshold:
            return _AUTO_LEVELS[index]
    return _AUTO_LEVELS[3 if len(thresholds) >= 3 else max(len(thresholds) - 1, 0)]
