"""A structural diff of two runs' traces: `python -m runner.compare --diff BEFORE AFTER`.

The merged step trees are aligned level by level, each matched pair's children as sequences of labels
(difflib), so a span is matched by its place among its siblings, not by its name alone. What does not align
is a block: spans replaced (naive ops -> `aten::rms_norm`), removed, or added. Every node is tested
(Mann-Whitney over the recorded cycles, Benjamini-Hochberg q-values across the tree).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from scipy import stats

from runner.measure.stats import SIGNIFICANCE, mann_whitney_p
from runner.measure.traces import Profile, ProfileNode, Span

MATCHED, REPLACED, REMOVED, ADDED = "matched", "replaced", "removed", "added"
_MARKS = {MATCHED: "=", REPLACED: "~", REMOVED: "-", ADDED: "+"}
BLOCKS_TRACK = "diff blocks"  # the Perfetto file's track of block slices, drawn over the spans they group


@dataclass
class DiffNode:
    """A matched pair of spans, a block of unaligned spans, or one span present on one side only."""

    kind: str
    before: list[ProfileNode]
    after: list[ProfileNode]
    before_us: list[float]
    after_us: list[float]
    children: list[DiffNode] = field(default_factory=list)
    p_value: float | None = None
    q_value: float | None = None
    number: int = 0  # this node's number in the Perfetto file's labels

    @property
    def title(self) -> str:
        """What the row says: the span's label, or what a block replaced with what."""
        if self.kind == REPLACED:
            return f"replaced {_summary(self.before)} by {_summary(self.after)}"
        nodes = self.before or self.after
        return nodes[0].label if len(nodes) == 1 else f"{self.kind} {_summary(nodes)}"

    @property
    def median_before(self) -> float:
        """Median time per step before (0 where the span is absent)."""
        return statistics.median(self.before_us) if self.before else 0.0

    @property
    def median_after(self) -> float:
        """Median time per step after (0 where the span is absent)."""
        return statistics.median(self.after_us) if self.after else 0.0

    @property
    def delta(self) -> float:
        """After minus before, in microseconds per step."""
        return self.median_after - self.median_before

    def walk(self) -> list[DiffNode]:
        """The node and every node below it, depth first."""
        return [self, *(node for child in self.children for node in child.walk())]


def _summary(nodes: list[ProfileNode]) -> str:
    counts = Counter(node.label for node in nodes)
    parts = [f"{n}x {label}" if n > 1 else label for label, n in counts.items()]
    text = ", ".join(parts[:3]) + (f", ... ({len(nodes)} spans)" if len(parts) > 3 else "")
    return f"[{text}]"


def _summed(nodes: list[ProfileNode], cycles: int) -> list[float]:
    return [sum(values) for values in zip(*(n.cycle_us for n in nodes), strict=True)] if nodes else [0.0] * cycles


def _one_sided(node: ProfileNode, kind: str, cycles_before: int, cycles_after: int) -> DiffNode:
    """A span present in one run only, with its subtree (also one-sided)."""
    before, after = ([node], []) if kind == REMOVED else ([], [node])
    diff = DiffNode(kind, before, after, _summed(before, cycles_before), _summed(after, cycles_after))
    diff.children = [_one_sided(child, kind, cycles_before, cycles_after) for child in node.children]
    return diff


def align(before: ProfileNode, after: ProfileNode, cycles_before: int, cycles_after: int) -> DiffNode:
    """The matched pair `before`/`after` with their children aligned below it."""
    node = DiffNode(MATCHED, [before], [after], before.cycle_us, after.cycle_us)
    old_labels, new_labels = ([child.label for child in side.children] for side in (before, after))
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old_labels, new_labels, autojunk=False).get_opcodes():
        old, new = before.children[i1:i2], after.children[j1:j2]
        if tag == "equal":
            node.children += [align(a, b, cycles_before, cycles_after) for a, b in zip(old, new, strict=True)]
            continue
        kind = REPLACED if old and new else REMOVED if old else ADDED
        members = [_one_sided(n, REMOVED, cycles_before, cycles_after) for n in old]
        members += [_one_sided(n, ADDED, cycles_before, cycles_after) for n in new]
        block = DiffNode(kind, old, new, _summed(old, cycles_before), _summed(new, cycles_after), members)
        node.children.append(members[0] if len(members) == 1 else block)
    return node


def diff_profiles(before: Profile, after: Profile) -> DiffNode:
    """The aligned tree of two runs, tested: p-values per node where both runs recorded 2+ cycles."""
    root = align(before.root, after.root, before.cycles, after.cycles)
    nodes = root.walk()
    for number, node in enumerate(nodes, 1):
        node.number = number
    if before.cycles >= 2 and after.cycles >= 2:
        for node in nodes:
            node.p_value = mann_whitney_p(node.before_us, node.after_us)
        q_values = stats.false_discovery_control([n.p_value for n in nodes if n.p_value is not None], method="bh")
        for node, q in zip(nodes, q_values, strict=True):
            node.q_value = float(q)
    return root


def _by_impact(nodes: list[DiffNode]) -> list[DiffNode]:
    return sorted(nodes, key=lambda n: -abs(n.delta))


def render_tree(root: DiffNode, depth: int) -> str:
    """The aligned tree, largest change first among siblings, `depth` levels below the step."""
    lines = [f"{'before us':>11} {'after us':>11} {'delta us':>11} {'change':>8} {'q':>8}  subtree"]

    def add(node: DiffNode, level: int) -> None:
        change = f"{node.delta / node.median_before:+.0%}" if node.before and node.median_before else ""
        before = f"{node.median_before:.1f}" if node.before else "-"
        after = f"{node.median_after:.1f}" if node.after else "-"
        q = "n/a" if node.q_value is None else f"{node.q_value:.3f}{' *' if node.q_value < SIGNIFICANCE else ''}"
        title = f"{'  ' * level}{_MARKS[node.kind]} {node.title}"
        lines.append(f"{before:>11} {after:>11} {node.delta:>+11.1f} {change:>8} {q:>8}  {title}")
        if level < depth:
            for child in _by_impact(node.children):
                add(child, level + 1)

    add(root, 0)
    return "\n".join(lines)


def legend(before_name: str, after_name: str, before: Profile, after: Profile) -> str:
    """How to read the tree: which run is which, the marks, and what the test can say."""
    if before.cycles >= 2 and after.cycles >= 2:
        test = (
            f"q: Benjamini-Hochberg q-value of a two-sided Mann-Whitney test over the recorded cycles "
            f"({before.cycles} before, {after.cycles} after); * where q < {SIGNIFICANCE}"
        )
    else:
        test = "q: n/a, one recorded cycle in a run; schedule=repeat records five, enough for a test"
    return "\n".join([
        f"before: {before_name} ({len(before.steps)} steps in {before.cycles} cycles)",
        f"after:  {after_name} ({len(after.steps)} steps in {after.cycles} cycles)",
        "times: median over cycles of the span's time per step, in microseconds, from the profiled steps",
        "       (the profiler's own cost included; time/step_median_ms is the unprofiled step)",
        "marks: = matched, ~ a block replaced by another, - only before, + only after",
        test,
    ])  # fmt: skip


def to_json(node: DiffNode) -> dict[str, Any]:
    """The tree as plain data (diff.json)."""
    return {
        "kind": node.kind,
        "title": node.title,
        "number": node.number,
        "before_us": node.median_before if node.before else None,
        "after_us": node.median_after if node.after else None,
        "delta_us": node.delta,
        "p_value": node.p_value,
        "q_value": node.q_value,
        "children": [to_json(child) for child in _by_impact(node.children)],
    }


@dataclass
class _Drawing:
    """What drawing one run's step needs: which diff node holds each profile node, and the output."""

    pid: int
    offset_us: float
    # id(ProfileNode) -> the matched or one-sided diff node of that span, and the block it is in
    own: dict[int, DiffNode]
    block: dict[int, DiffNode]
    events: list[dict[str, Any]]
    # (diff node number, pid) -> where its flow arrow starts or ends: (tid, ts)
    anchors: dict[tuple[int, int], tuple[int, float]]
    # the trace's "pid/tid" of each thread -> a small thread number in this process
    threads: dict[str, int] = field(default_factory=dict)

    def tid(self, thread: str) -> int:
        """The thread's number here, named after the original thread on first use."""
        if thread not in self.threads:
            self.threads[thread] = len(self.threads) + 1
            name = BLOCKS_TRACK if thread == BLOCKS_TRACK else f"thread {thread.split('/')[-1]}"
            self.events.append({"ph": "M", "pid": self.pid, "tid": self.threads[thread], "name": "thread_name",
                                "args": {"name": name}})  # fmt: skip
        return self.threads[thread]

    def args(self, node: DiffNode | None) -> dict[str, Any]:
        """A span's diff, as Perfetto shows it in the slice's details."""
        if node is None:
            return {}
        where = {REMOVED: "only before", ADDED: "only after"}.get(node.kind, f"{node.kind} #{node.number}")
        return {"diff": where, "delta_us": round(node.delta, 3), "q": node.q_value}


def perfetto_trace(root: DiffNode, before: Profile, after: Profile, names: tuple[str, str]) -> dict[str, Any]:
    """A Chrome/Perfetto JSON trace: one typical step of each run, one process above the other.

    Every span carries its diff in its args; a block of several spans gets an enclosing slice named for it;
    a flow arrow joins each matched pair and each block, before to after.
    """
    own: dict[int, DiffNode] = {}
    block: dict[int, DiffNode] = {}
    for node in root.walk():
        single = node.kind == MATCHED or len(node.before) + len(node.after) == 1
        for profile_node in (*node.before, *node.after):
            (own if single else block)[id(profile_node)] = node
    events: list[dict[str, Any]] = []
    anchors: dict[tuple[int, int], tuple[int, float]] = {}
    for pid, (profile, name) in enumerate(((before, names[0]), (after, names[1])), 1):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}})
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
        step = sorted(profile.steps, key=lambda s: s.dur_us)[(len(profile.steps) - 1) // 2]  # the median: drawn
        _draw(step, profile.root, _Drawing(pid, step.start_us, own, block, events, anchors))
    for node in root.walk():
        start, end = anchors.get((node.number, 1)), anchors.get((node.number, 2))
        if start is None or end is None:
            continue
        flow = {"name": f"#{node.number}", "cat": "diff", "id": node.number}
        events.append({**flow, "ph": "s", "pid": 1, "tid": start[0], "ts": start[1]})
        events.append({**flow, "ph": "f", "bp": "e", "pid": 2, "tid": end[0], "ts": end[1]})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _draw(span: Span, node: ProfileNode, drawing: _Drawing) -> None:
    """One span and its subtree as X events; the spans of a block get an enclosing slice."""
    diff = drawing.own.get(id(node))
    ts = round(span.start_us - drawing.offset_us, 3)  # nanoseconds: what a trace viewer resolves
    drawing.events.append({
        "ph": "X", "name": span.name, "cat": "device" if span.device else "host", "pid": drawing.pid,
        "tid": drawing.tid(span.thread), "ts": ts, "dur": round(span.dur_us, 3), "args": drawing.args(diff),
    })  # fmt: skip
    if diff is not None and diff.kind == MATCHED:
        drawing.anchors.setdefault((diff.number, drawing.pid), (drawing.tid(span.thread), ts))
    # the step's spans map to the profile's nodes as the merge keyed them: (label, occurrence)
    by_label: dict[str, list[ProfileNode]] = {}
    for child in node.children:
        by_label.setdefault(child.label, []).append(child)
    blocks: dict[int, tuple[DiffNode, list[Span]]] = {}
    for child_span in span.children:
        child = by_label[child_span.label].pop(0)
        _draw(child_span, child, drawing)
        if (owner := drawing.block.get(id(child))) is not None:
            blocks.setdefault(owner.number, (owner, []))[1].append(child_span)
    for number, (owner, members) in blocks.items():
        # on a track of their own: a slice there never has to nest with the spans it groups
        start = min(m.start_us for m in members) - drawing.offset_us
        end = max(m.end_us for m in members) - drawing.offset_us
        track = drawing.tid(BLOCKS_TRACK)
        drawing.events.append({
            "ph": "X", "name": f"#{number} {owner.title}", "cat": "diff", "pid": drawing.pid, "tid": track,
            "ts": round(start, 3), "dur": round(end - start, 3), "args": drawing.args(owner),
        })  # fmt: skip
        drawing.anchors.setdefault((number, drawing.pid), (track, round(start, 3)))
