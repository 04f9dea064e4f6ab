"""The cost of showing link addresses on adversarial model text, as the input doubles.

Run: `python bench/markdown_links.py`. Each family is text crafted against the link
patterns (runs of `[`, image openers, links never closed, autolinks never closed), fed to
`to_mrkdwn` (answers and edits), `show_link_targets` (task updates) and `StreamLinks` (the
native stream, in 40-character deltas as a model streams them). With RE2 the time per
character stays flat as the size doubles; the backtracking patterns took about 4 s on
20,000 `[` (quadratic) on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.slack.markdown import StreamLinks, show_link_targets, to_mrkdwn

FAMILIES = {
    "run of [": "[",
    "images never closed": "![a",
    "links never closed": "[label](https://x.example/",
    "autolinks never closed": "<https:",
}
SIZES = [25_000, 50_000, 100_000, 200_000]
DELTA = 40


def streamed(text: str) -> str:
    links = StreamLinks()
    out = [links.feed(text[i : i + DELTA]) for i in range(0, len(text), DELTA)]
    return "".join(out) + links.flush()


PATHS: dict[str, Callable[[str], str]] = {
    "to_mrkdwn": to_mrkdwn,
    "show_link_targets": show_link_targets,
    "StreamLinks": streamed,
}


def cost(path: Callable[[str], str], text: str) -> float:
    start = time.perf_counter()
    path(text)
    return time.perf_counter() - start


def main() -> None:
    header = " ".join(f"{size:>10,}" for size in SIZES)
    print(f"{'family':24} {'path':18} {header}   ns/char")
    for name, unit in FAMILIES.items():
        for path_name, path in PATHS.items():
            times = []
            for size in SIZES:
                text = (unit * (size // len(unit) + 1))[:size]
                times.append(min(cost(path, text) for _ in range(2)))
            per_char = " ".join(f"{t / s * 1e9:.0f}" for t, s in zip(times, SIZES, strict=True))
            cells = " ".join(f"{t * 1000:>8.1f}ms" for t in times)
            print(f"{name:24} {path_name:18} {cells}   {per_char}")
    print("Linear: ns/char stays flat while the size doubles (RE2, no backtracking).")


if __name__ == "__main__":
    main()
