"""A run's profiler traces as trees of spans, one per recorded step, merged into one profile.

Inside each `ProfilerStep#N`, host spans nest by time, other threads' spans hang under the step and
device spans under the call that launched them. Steps merge by a span's path of (label, occurrence)
pairs, keeping its time in every cycle for significance tests. Not HTA: docs/comparing.md says why.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.chrome_trace import read_chrome_trace

# host spans that form the tree: ops, annotations (steps, compiled regions, optimizer), module
# scopes; and the runtime calls that launch device work (cuda_runtime, privateuse1_runtime, ...)
_HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
_LAUNCH_CATEGORY_SUFFIXES = ("_runtime", "_driver")
_DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
# parts of a name that differ between runs of the same code: step numbers, compiled graph hashes
_VOLATILE = [(re.compile(r"#\d+$"), ""), (re.compile(r"\b[0-9a-z]{40,}\b"), "<hash>")]
# start and end times are floats in microseconds; allow for their rounding when nesting
_NEST_SLACK_US = 0.01


def label_of(name: str) -> str:
    """The name with what differs between identical runs removed (ProfilerStep#7 -> ProfilerStep)."""
    for pattern, replacement in _VOLATILE:
        name = pattern.sub(replacement, name)
    return name


@dataclass
class Span:
    """One span of one step: its name, start and duration in microseconds, and what nests in it."""

    name: str
    start_us: float
    dur_us: float
    thread: str
    device: bool = False
    children: list[Span] = field(default_factory=list)

    @property
    def end_us(self) -> float:
        """When it ended."""
        return self.start_us + self.dur_us

    @property
    def label(self) -> str:
        """Its name as two runs can share it."""
        return label_of(self.name)


def _is_host(event: dict[str, Any]) -> bool:
    category = str(event.get("cat", ""))
    if category == "python_function":  # only module scopes; Python frames are noise here
        return str(event.get("name", "")).startswith("nn.Module:")
    return category in _HOST_CATEGORIES or category.endswith(_LAUNCH_CATEGORY_SUFFIXES)


def _nest(spans: list[Span]) -> list[Span]:
    """Roots of `spans` (all on one thread), each holding the spans inside its time window."""
    roots: list[Span] = []
    open_spans: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start_us, -s.dur_us)):
        while open_spans and span.start_us >= open_spans[-1].end_us - _NEST_SLACK_US:
            open_spans.pop()
        while open_spans and span.end_us > open_spans[-1].end_us + _NEST_SLACK_US:  # overlaps: not inside
            open_spans.pop()
        (open_spans[-1].children if open_spans else roots).append(span)
        open_spans.append(span)
    return roots


def read_steps(trace: dict[str, Any]) -> list[Span]:
    """The trace's `ProfilerStep` spans, in order, with everything that ran inside each."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    by_thread: dict[str, list[Span]] = defaultdict(list)
    launches: dict[Any, Span] = {}
    device: list[tuple[Any, Span]] = []
    for event in events:
        thread = f"{event.get('pid')}/{event.get('tid')}"
        span = Span(str(event["name"]), float(event["ts"]), float(event["dur"]), thread)
        correlation = (event.get("args") or {}).get("correlation")
        if event.get("cat") in _DEVICE_CATEGORIES:
            span.device = True
            device.append((correlation, span))
        elif _is_host(event):
            by_thread[thread].append(span)
            if str(event.get("cat", "")).endswith(_LAUNCH_CATEGORY_SUFFIXES) and correlation is not None:
                launches[correlation] = span
    for correlation, span in device:
        if correlation in launches:
            launches[correlation].children.append(span)
    roots = {thread: _nest(spans) for thread, spans in by_thread.items()}
    steps = sorted(
        (root for spans in roots.values() for root in spans if STEP.match(root.name)), key=lambda s: s.start_us
    )
    step_threads = {step.thread for step in steps}
    # work on other threads (autograd, ...) inside a step's window
    for span in (span for thread, spans in roots.items() if thread not in step_threads for span in spans):
        owner = next((s for s in steps if s.start_us <= span.start_us < s.end_us), None)
        if owner is not None:
            owner.children.append(span)
    for step in steps:
        step.children.sort(key=lambda s: s.start_us)
    return steps


def _step_number(step: Span) -> int:
    """N of ProfilerStep#N."""
    found = STEP.match(step.name)
    return int(found.group(1)) if found else -1


@dataclass
class ProfileNode:
    """One position in a run's step tree: its label, per-cycle time per step, and its children in order."""

    label: str
    device: bool
    # per recorded cycle, the mean time per step spent in this span (0 in steps without it)
    cycle_us: list[float]
    children: list[ProfileNode] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        """The median over cycles of the time per step."""
        return statistics.median(self.cycle_us) if self.cycle_us else 0.0


@dataclass
class Profile:
    """A run's steps merged into one tree, with the spans of every step for drawing one."""

    root: ProfileNode
    steps: list[Span]
    cycles: int


def _by_path(span: Span, path: tuple[tuple[str, int], ...] = ()) -> Iterator[tuple[tuple[tuple[str, int], ...], Span]]:
    """Each span under `span` (itself first) with its path of (label, occurrence) pairs, in depth-first order."""
    yield path, span
    seen: dict[str, int] = defaultdict(int)
    for child in span.children:
        yield from _by_path(child, (*path, (child.label, seen[child.label])))
        seen[child.label] += 1


def load_profile(paths: list[Path]) -> Profile:
    """Chrome traces (one per recorded cycle) as a run's steps merged by position; ValueError without a step."""
    cycles = [read_steps(read_chrome_trace(path) or {}) for path in paths]
    cycles.sort(key=lambda steps: _step_number(steps[0]) if steps else -1)
    steps = [step for cycle in cycles for step in cycle]
    if not steps:
        raise ValueError("the traces hold no ProfilerStep span")
    nodes: dict[tuple[tuple[str, int], ...], ProfileNode] = {}
    for number, cycle in enumerate(cycles):
        for path, span in (pair for step in cycle for pair in _by_path(step)):
            if path not in nodes:
                nodes[path] = ProfileNode(span.label, span.device, [0.0] * len(cycles))
                if path:
                    nodes[path[:-1]].children.append(nodes[path])
            nodes[path].cycle_us[number] += span.dur_us / len(cycle)
    recorded = [number for number, cycle in enumerate(cycles) if cycle]
    for node in nodes.values():  # cycles that recorded no step are not samples
        node.cycle_us = [node.cycle_us[number] for number in recorded]
    return Profile(nodes[()], steps, len(recorded))


def steps_under(folder: Path) -> list[Span]:
    """The recorded steps of every Chrome trace under `folder` (a job's capture)."""
    traces = (read_chrome_trace(path) for path in sorted(folder.rglob("*.json")))
    return [step for trace in traces if trace is not None for step in read_steps(trace)]
