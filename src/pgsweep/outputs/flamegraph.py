"""A differential flame graph (issue 26), self-contained SVG: the stacks of one
configuration's profile drawn as a flame graph (each frame as wide as its share of that
profile's samples, callers below callees), each frame coloured by how its share changed
against the other profile: red where it grew, blue where it shrank, white where it held
(both normalised by their total samples, so a longer or busier profile does not redden
everything). Frames narrower than MIN_SHARE are left out; every frame's name is escaped
and its tooltip gives both shares."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from html import escape

WIDTH, ROW, MIN_SHARE, MAX_DEPTH = 1100.0, 16, 0.005, 64


@dataclass
class Node:
    after: float = 0.0  # share of the profile drawn
    before: float = 0.0  # share of the profile compared against
    children: dict[str, Node] = field(default_factory=dict)


def tree(after: Counter[str], before: Counter[str]) -> Node:
    root = Node()
    for stacks, attr in ((after, "after"), (before, "before")):
        total = sum(stacks.values()) or 1
        for stack, n in stacks.items():
            node = root
            setattr(node, attr, getattr(node, attr) + n / total)
            for frame in stack.split(";")[:MAX_DEPTH]:
                node = node.children.setdefault(frame, Node())
                setattr(node, attr, getattr(node, attr) + n / total)
    return root


def colour(delta: float, scale: float) -> str:
    """Red for a larger share, blue for a smaller one, as strong as the change."""
    strength = min(abs(delta) / scale, 1.0) if scale > 0 else 0.0
    fade = round(255 * (1 - 0.75 * strength))
    return f"rgb(255,{fade},{fade})" if delta > 0 else f"rgb({fade},{fade},255)"


def svg(after: Counter[str], before: Counter[str], title: str) -> str:
    """The graph of `after` coloured against `before` ("" when `after` is empty)."""
    if not after:
        return ""
    root = tree(after, before)
    boxes: list[tuple[int, float, float, str, Node]] = []  # depth, x, width, name, node

    def walk(node: Node, depth: int, x: float) -> None:
        for name, child in sorted(node.children.items()):
            width = child.after * WIDTH
            if child.after >= MIN_SHARE:
                boxes.append((depth, x, width, name, child))
                walk(child, depth + 1, x)
            x += width

    walk(root, 0, 0.0)
    scale = max((abs(n.after - n.before) for *_, n in boxes), default=0.0)
    depth = max((d for d, *_ in boxes), default=0) + 1
    height = (depth + 2) * ROW
    out = [f'<svg class="flame" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH:.0f} '
           f'{height}" width="100%" role="img" aria-label="{escape(title)}">',
           f'<text x="4" y="{ROW - 4}" font-size="12">{escape(title)}</text>']  # fmt: skip
    for d, x, width, name, node in boxes:
        y = height - (d + 1) * ROW
        tip = (f"{name}: {node.after:.1%} of the samples ({node.before:.1%} against)")
        label = escape(name if len(name) * 7 < width else name[: max(int(width / 7) - 2, 0)]
                       + ".." if width > 30 else "")  # fmt: skip
        out.append(f'<g><title>{escape(tip)}</title><rect x="{x:.2f}" y="{y}" '
                   f'width="{max(width - 0.5, 0.1):.2f}" height="{ROW - 1}" '
                   f'fill="{colour(node.after - node.before, scale)}" stroke="#999" '
                   f'stroke-width="0.3"/><text x="{x + 3:.2f}" y="{y + ROW - 4}" '
                   f'font-size="11">{label}</text></g>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)
