"""Markdown (what the model writes) → Slack mrkdwn (what messages and section blocks show),
and splitting long text into pieces Slack accepts.

Owns: bold, italics, strikethrough, inline code, fenced code, links and images, headings,
bullet and task lists, horizontal rules, and tables (rendered as aligned code blocks, since
mrkdwn has none); escaping of `&`, `<` and `>`. The model's text is untrusted: Slack tokens
it writes (`<@U…>`, `<!here>`, `<http://evil|safe>`) are escaped, never passed on, and a
Markdown link shows its real address next to its label.

Deliberately not a full CommonMark parser: no nested emphasis edge cases, reference links
or HTML. The native stream takes Markdown as is, except that its links too show their real
address (`show_link_targets`, and `StreamLinks` for text that arrives in deltas).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass

import re2

SECTION_LIMIT = 3000  # Block Kit section text
MAX_BLOCKS = 50  # blocks per message
# Longer texts are converted in a worker thread: about 6 ms of CPU per 10,000 characters
# here, enough to hold up acknowledgements and other turns on the event loop.
THREAD_THRESHOLD = 8_000

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 8 << 20


def _re2(pattern: str) -> re2._Regexp:
    """Link patterns run on model text: RE2 matches in linear time, where a backtracking
    engine takes seconds on a long run of `[` (quadratic) and stalls the event loop."""
    return re2.compile(pattern, _RE2_OPTIONS)


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(\[[ xX]\]\s+)?(.*)$")
_QUOTE = re.compile(r"^(\s*(?:>\s?)+)(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# A link target may hold balanced parentheses (`https://en.wikipedia.org/wiki/Pod_(k8s)`).
_TARGET = r"((?:[^()\s]|\([^()\s]*\))+)"
_IMAGE = _re2(r"!\[([^\]]*)\]\(" + _TARGET + r"(?:\s+\"[^\"]*\")?\)")
_LINK = _re2(r"\[([^\]]+)\]\(" + _TARGET + r"(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = _re2(r"<((?:https?|mailto):[^>\s|]+)>")
_ENTITY = re.compile(r"&(amp|lt|gt);")
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD_STAR = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_BOLD_UNDER = re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")

# Private-use characters stand in for protected pieces while the inline rules run.
_HOLD = "\ue000"
_BOLD_MARK = "\ue001"
_KEEP = "\ue002"
_SLACK_TOKEN = re.compile(r"<[@#!][^<>\s]+>")


def to_mrkdwn(markdown: str, *, keep_slack_tokens: bool = False) -> str:
    """Convert Markdown to Slack mrkdwn, escaping any Slack markup in it.

    `keep_slack_tokens` keeps `<@U…>`, `<#C…>` and `<!…>` as they are: only for text whose
    untrusted parts were already escaped, so every raw token left is kelpie's own."""
    if not keep_slack_tokens:
        return _convert(markdown)
    kept: list[str] = []

    def keep(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return f"{_KEEP}{len(kept) - 1}{_KEEP}"

    converted = _convert(_SLACK_TOKEN.sub(keep, markdown))
    return re.sub(f"{_KEEP}(\\d+){_KEEP}", lambda m: kept[int(m.group(1))], converted)


async def to_mrkdwn_async(markdown: str, *, keep_slack_tokens: bool = False) -> str:
    """`to_mrkdwn`, in a worker thread when the text is long."""
    if len(markdown) < THREAD_THRESHOLD:
        return to_mrkdwn(markdown, keep_slack_tokens=keep_slack_tokens)
    return await asyncio.to_thread(to_mrkdwn, markdown, keep_slack_tokens=keep_slack_tokens)


def _convert(markdown: str) -> str:
    out: list[str] = []
    lines = markdown.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            i = _copy_code_block(lines, i, fence, out)
            continue
        if _starts_table(lines, i):
            i = _render_table(lines, i, out)
            continue
        out.append(_convert_line(line))
        i += 1
    return "\n".join(out)


def _copy_code_block(lines: list[str], start: int, fence: re.Match[str], out: list[str]) -> int:
    marker = fence.group(2)
    body: list[str] = []
    i = start + 1
    while i < len(lines):
        closing = _FENCE.match(lines[i])
        if closing and closing.group(2).startswith(marker[0] * 3) and not closing.group(3).strip():
            i += 1
            break
        body.append(escape(lines[i]))
        i += 1
    # Slack ignores the language tag and shows it as code text, so it is dropped.
    out.append("```")
    out.extend(body)
    out.append("```")
    return i


def _starts_table(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and "|" in lines[i]
        and "|" in lines[i + 1]
        and bool(_TABLE_SEPARATOR.match(lines[i + 1]))
    )


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if stripped.startswith("|"):
        stripped = stripped[1:]
    if stripped.endswith("|") and not stripped.endswith("\\|"):
        stripped = stripped[:-1]
    cells = re.split(r"(?<!\\)\|", stripped)
    return [_plain(cell.strip().replace("\\|", "|")) for cell in cells]


def _plain(text: str) -> str:
    """Cell text without Markdown emphasis, links as "text (url)"."""
    if "[" in text:  # RE2 costs a call even where nothing matches: cells are many
        text = _LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})", text)
    text = _unbold(text)
    text = _CODE_SPAN.sub(r"\2", text)
    return text


def _render_table(lines: list[str], start: int, out: list[str]) -> int:
    header = _cells(lines[start])
    rows: list[list[str]] = []
    i = start + 2
    while i < len(lines) and "|" in lines[i] and lines[i].strip():
        rows.append(_cells(lines[i]))
        i += 1
    width = max(len(header), *(len(row) for row in rows)) if rows else len(header)
    table = [row + [""] * (width - len(row)) for row in [header, *rows]]
    widths = [max(len(row[c]) for row in table) for c in range(width)]

    def render(row: list[str]) -> str:
        return " | ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip()

    out.append("```")
    out.append(escape(render(table[0])))
    out.append("-+-".join("-" * w for w in widths))
    out.extend(escape(render(row)) for row in table[1:])
    out.append("```")
    return i


def _convert_line(line: str) -> str:
    quote = _QUOTE.match(line)
    if quote:
        # Slack quotes a line that starts with a literal ">"; the rest converts as usual.
        return ">" * quote.group(1).count(">") + " " + _convert_line(quote.group(2))
    if _RULE.match(line):
        return "──────────"
    heading = _HEADING.match(line)
    if heading:
        text = _unbold(heading.group(2))
        return f"*{_inline(text)}*" if text else ""
    bullet = _BULLET.match(line)
    if bullet:
        indent, task, text = bullet.groups()
        mark = "•"
        if task:
            mark = "☑" if task.strip().lower() == "[x]" else "☐"
        return f"{indent}{mark} {_inline(text)}"
    return _inline(line)


def _inline(text: str) -> str:
    """Inline rules on one line: code spans stay literal, links become Slack links."""
    held: list[str] = []

    def hold(value: str) -> str:
        held.append(value)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    text = _CODE_SPAN.sub(lambda m: hold(f"`{escape(m.group(2))}`"), text)
    if "[" in text:
        text = _IMAGE.sub(lambda m: hold(_link(m.group(2), escape(m.group(1) or m.group(2)))), text)
        text = _LINK.sub(lambda m: hold(_link(m.group(2), _emphasis(escape(m.group(1))))), text)
    if "<" in text:
        text = _AUTOLINK.sub(lambda m: hold(f"<{m.group(1)}>"), text)
    text = _emphasis(escape(text))
    pattern = re.compile(f"{_HOLD}(\\d+){_HOLD}")
    # Held pieces never contain placeholders of their own, so one pass restores them.
    return pattern.sub(lambda m: held[int(m.group(1))], text)


def _unbold(text: str) -> str:
    return _BOLD_UNDER.sub(r"\1", _BOLD_STAR.sub(r"\1", text))


def _emphasis(text: str) -> str:
    def bold(match: re.Match[str]) -> str:
        return f"{_BOLD_MARK}{match.group(1)}{_BOLD_MARK}"

    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD_MARK}_{m.group(1)}_{_BOLD_MARK}", text)
    text = _BOLD_UNDER.sub(bold, _BOLD_STAR.sub(bold, text))
    text = _ITALIC_STAR.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    return text.replace(_BOLD_MARK, "*")


def _link(url: str, label: str) -> str:
    """A link shows its real address: `label (<url>)`, never a label hiding the URL."""
    url = escape(url.replace("|", "%7C"))
    if not url.startswith(("https://", "http://", "mailto:")):
        return f"{label} ({url})" if label and label != url else url
    return f"{label} (<{url}>)" if label and label != url else f"<{url}>"


def show_link_targets(markdown: str) -> str:
    """Markdown that stays Markdown, but each link and image shows its real address as text:
    `[label](url)` becomes `label (url)`, so a label can never hide where it goes. Code (a
    fenced block, an inline span) is left as written: nothing in it is a link."""
    if "[" not in markdown:
        return markdown
    return _outside_code(markdown, _CodeState(), _rewrite_links)[0]


def _rewrite_links(markdown: str) -> str:
    def plain(match: re2._Match) -> str:
        label, url = match.group(1), match.group(2)
        return f"{label} ({url})" if label and label != url else url

    if "[" not in markdown:
        return markdown
    markdown = _REFERENCE.sub(r"\1\2:", markdown)
    return _LINK.sub(plain, _IMAGE.sub(plain, markdown))


# A reference definition (`[1]: https://evil`) would make `[safe][1]` a link elsewhere in
# the text: without its brackets it defines nothing and shows its address as text.
_REFERENCE = _re2(r"(?m)^( {0,3})\[([^\]\n]+)\]:")


# What could still become a link once more text arrives, at the very end of the text:
# `!` (an image to be), `[label`, `[label]`, `[label](url`, `[label](url "title`, and a
# reference definition up to its line's end (`[1]: https://`). RE2 finds the leftmost such
# start in one linear pass.
_PARTIAL_LINK = _re2(
    r"!?(?:\[[^\]\n]*(?:\](?:\((?:[^()\s]|\([^()\s]*\))*(?:\([^()\s]*)?"
    r"(?:\s+(?:\"[^\"\n]*\"?)?)?|:[^\n]*)?)?)?\z"
)
STREAM_LINK_HOLD = 3000  # characters held back at most while a link may still complete

# --------------------------------------------------------------------------- code in text
# Where code is, read as `to_mrkdwn` reads it: a fenced block from its opening line to its
# closing one (or the end), and inline spans within one line (a run of backticks up to the
# next run of the same length).
_TICKS = re.compile(r"`+")
_MAYBE_FENCE = re.compile(r"\s*(?:`*|~*)")  # a line so far that may still open/close a fence
_PLACE = re.compile(f"{_HOLD}(\\d+){_HOLD}")


@dataclass(frozen=True)
class _CodeState:
    """Where a piece of text starts: inside a fenced block (its marker) or not, and at the
    start of a line or within one (then outside any inline span)."""

    fence: str | None = None
    midline: bool = False


@dataclass(frozen=True)
class _CodeScan:
    code: list[tuple[int, int]]  # [start, end) of each piece of code, in order
    decided: int  # the text up to here is known to be code or not
    state: _CodeState  # where the text from `decided` starts


def _scan_code(text: str, state: _CodeState, *, final: bool) -> _CodeScan:
    """The code in `text`. Unless `final` (nothing follows), the last line may leave its
    end undecided: a line that may still become a fence, an inline span not yet closed."""
    code: list[tuple[int, int]] = []
    fence, midline, pos = state.fence, state.midline, 0
    while pos < len(text):
        newline = text.find("\n", pos)
        end = len(text) if newline < 0 else newline
        after = len(text) if newline < 0 else newline + 1
        complete = newline >= 0 or final
        if not midline and not complete and _MAYBE_FENCE.fullmatch(text, pos, end):
            return _CodeScan(code, pos, _CodeState(fence, False))
        marker = None if midline else _FENCE.match(text[pos:end])
        if fence is not None or marker is not None:
            code.append((pos, after))
            fence = _fence_after(fence, marker)
        else:
            spans, open_at = _inline_code(text, pos, end, complete)
            code += spans
            if open_at is not None:
                return _CodeScan(code, open_at, _CodeState(None, open_at > pos or midline))
        midline = newline < 0
        pos = after
    return _CodeScan(code, len(text), _CodeState(fence, midline if text else state.midline))


def _fence_after(fence: str | None, marker: re.Match[str] | None) -> str | None:
    """The fence open after a line of code; `marker`: the line's fence, read at its start
    (None within a block, or for the rest of a line already read)."""
    if marker is None:
        return fence
    if fence is None:
        return marker.group(2)
    closes = marker.group(2)[0] == fence[0] and not marker.group(3).strip()
    return None if closes else fence


def _inline_code(
    text: str, start: int, end: int, complete: bool
) -> tuple[list[tuple[int, int]], int | None]:
    """Inline code spans in text[start:end] (one line), and where an unclosed run of
    backticks begins when the line is not complete (it may close later)."""
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text, start, end)]
    following: list[int | None] = [None] * len(runs)
    last: dict[int, int] = {}
    for k in range(len(runs) - 1, -1, -1):
        length = runs[k][1] - runs[k][0]
        following[k] = last.get(length)
        last[length] = k
    spans: list[tuple[int, int]] = []
    k = 0
    while k < len(runs):
        closer = following[k]
        if not complete and (closer is None or runs[closer][1] == end):
            return spans, runs[k][0]  # may still close, or its closer may still grow
        if closer is None:
            k += 1  # a run nothing closes is literal backticks
            continue
        spans.append((runs[k][0], runs[closer][1]))
        k = closer + 1
    return spans, None


def _outside_code(
    text: str, state: _CodeState, rewrite: Callable[[str], str]
) -> tuple[str, _CodeState]:
    """`rewrite` applied to all of `text` but its code, which is kept as written; and the
    state where the text ends."""
    scan = _scan_code(text, state, final=True)
    masked, pieces = _mask(text, scan.code)
    return _unmask(rewrite(masked), pieces), scan.state


def _mask(text: str, code: list[tuple[int, int]]) -> tuple[str, list[str]]:
    out: list[str] = []
    pieces: list[str] = []
    pos = 0
    for start, end in code:
        out.append(text[pos:start])
        out.append(f"{_HOLD}{len(pieces)}{_HOLD}")
        pieces.append(text[start:end])
        pos = end
    out.append(text[pos:])
    return "".join(out), pieces


def _unmask(text: str, pieces: list[str]) -> str:
    if not pieces:
        return text

    def piece(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return pieces[index] if index < len(pieces) else match.group(0)

    return _PLACE.sub(piece, text)


class StreamLinks:
    """`show_link_targets` for text that arrives in pieces (the native stream): a possible
    link is held back until it completes (and is rewritten) or can no longer be one, and so
    is text that may still turn out to be code (a line that may open a fence, a backtick
    that may open a span), since code is left as written. Text held past `STREAM_LINK_HOLD`
    is let go with its `[` escaped outside code, so that no later piece can turn it into a
    link."""

    def __init__(self) -> None:
        self._held = ""
        self._state = _CodeState()  # where the held text starts

    def feed(self, text: str) -> str:
        """What of the text so far may be sent now."""
        text = self._held + text
        scan = _scan_code(text, self._state, final=False)
        masked, pieces = _mask(text[: scan.decided], scan.code)
        rewritten = _rewrite_links(masked)
        at = _partial_start(rewritten)
        sent = _unmask(rewritten[:at], pieces)
        if at < len(rewritten):  # a possible link, in prose within a line
            start_midline = rewritten[at - 1] != "\n" if at else self._state.midline
            self._state = _CodeState(None, start_midline)
        else:
            self._state = scan.state
        self._held = _unmask(rewritten[at:], pieces) + text[scan.decided :]
        if len(self._held) <= STREAM_LINK_HOLD:
            return sent
        # Too long to wait for: let it go with each `[` escaped; keep watching the rest.
        cut = len(self._held) - STREAM_LINK_HOLD
        released, self._state = _outside_code(
            self._held[:cut], self._state, lambda t: t.replace("[", "\\[")
        )
        self._held = self._held[cut:]
        return sent + released + self.feed("")

    def flush(self) -> str:
        """The text held back, now that nothing more follows it (a round or a turn ended)."""
        held, self._held = self._held, ""
        shown, self._state = _outside_code(held, self._state, _rewrite_links)
        return shown


def _partial_start(text: str) -> int:
    partial = _PARTIAL_LINK.search(text)
    return partial.start() if partial else len(text)


def escape(text: str) -> str:
    """Escape Slack's control characters; existing `&amp;`-style entities are kept."""
    text = re.sub(r"&(?!(?:amp|lt|gt);)", "&amp;", text)
    return text.replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------------- splitting


def split_text(text: str, limit: int) -> list[str]:
    """Split text into pieces of at most `limit` characters, at paragraph boundaries where
    possible, then at line boundaries, then anywhere. A fenced code block is kept whole when
    it fits; a longer one is cut at lines and each piece is fenced again, so every piece
    renders on its own."""
    if limit < 16:
        raise ValueError("limit too small")
    pieces: list[str] = []
    current = ""
    for unit in _units(text):
        for part in _fit(unit, limit):
            candidate = f"{current}\n\n{part}" if current else part
            if len(candidate) <= limit:
                current = candidate
            else:
                if current:
                    pieces.append(current)
                current = part
    if current:
        pieces.append(current)
    return pieces or [""]


def _units(text: str) -> list[str]:
    """Paragraphs (separated by blank lines); a fenced code block is one unit."""
    units: list[str] = []
    block: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_code = not in_code
        if not in_code and not line.strip() and not _FENCE.match(line):
            if block:
                units.append("\n".join(block))
                block = []
            continue
        block.append(line)
    if block:
        units.append("\n".join(block))
    return units


def _fit(unit: str, limit: int) -> list[str]:
    if len(unit) <= limit:
        return [unit]
    lines = unit.split("\n")
    fenced = len(lines) >= 2 and _FENCE.match(lines[0]) is not None
    if fenced:
        opening = lines[0].strip()
        closing = "```" if opening.startswith("`") else "~~~"
        inner = lines[1:-1] if _FENCE.match(lines[-1]) else lines[1:]
        room = limit - len(opening) - len(closing) - 2
        return [f"{opening}\n{chunk}\n{closing}" for chunk in _pack_lines(inner, room)]
    return _pack_lines(lines, limit)


def _pack_lines(lines: list[str], limit: int) -> list[str]:
    pieces: list[str] = []
    current: str | None = None
    for line in lines:
        while len(line) > limit:
            if current is not None:
                pieces.append(current)
                current = None
            cut = line.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            pieces.append(line[:cut])
            line = line[cut:].lstrip(" ")
        candidate = line if current is None else f"{current}\n{line}"
        if len(candidate) <= limit:
            current = candidate
        else:
            if current is not None:
                pieces.append(current)
            current = line
    if current is not None:
        pieces.append(current)
    return pieces


def cut(text: str, limit: int) -> list[str]:
    """Cut text into consecutive pieces of at most `limit` characters whose concatenation
    is the text (for streams, where pieces join back seamlessly); prefers line ends."""
    pieces: list[str] = []
    while len(text) > limit:
        at = text.rfind("\n", limit // 2, limit)
        at = at + 1 if at > 0 else limit
        pieces.append(text[:at])
        text = text[at:]
    if text:
        pieces.append(text)
    return pieces


def section_blocks(mrkdwn: str) -> list[dict[str, object]]:
    """Section blocks for mrkdwn text, each within Slack's 3,000-character limit."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}}
        for part in split_text(mrkdwn, SECTION_LIMIT)
        if part
    ]


def open_fence(text: str) -> str | None:
    """The opening line of a fenced code block `text` leaves open, if any."""
    opener: str | None = None
    for line in text.split("\n"):
        fence = _FENCE.match(line)
        if fence is None:
            continue
        if opener is None:
            opener = line.strip()
        elif fence.group(2).startswith(opener[0] * 3) and not fence.group(3).strip():
            opener = None
    return opener


# Room a cut needs to close a fenced block it falls inside ("\n" + a closing fence).
FENCE_SEAM = 8


def stream_cut(sent: str, text: str, room: int) -> tuple[str, str]:
    """Cut `text`, which follows `sent` in one streamed message, into what still goes into
    that message (at most `room` characters) and what goes on in the next one.

    The cut falls at the last paragraph break outside code that fits; failing that, when
    `sent` already shows something, everything moves on (the paragraph starts the next
    message); only a fresh message is cut at a line end, then anywhere. A cut inside a fenced
    block closes it here and opens it again in the next message, so both render as code."""
    if len(text) <= room:
        return text, ""
    limit = max(room - FENCE_SEAM, 0)
    at = _paragraph_break(sent, text, limit)
    if at is None:
        if sent.strip() or limit == 0:
            return "", text
        newline = text.rfind("\n", limit // 2, limit)
        at = newline + 1 if newline > 0 else limit
    head, tail = text[:at], text[at:]
    opener = open_fence(sent + head)
    if opener is not None:
        closing = "```" if opener.startswith("`") else "~~~"
        head = head + ("" if head.endswith("\n") else "\n") + closing
        tail = f"{opener}\n{tail}"
    return head, tail


def _paragraph_break(sent: str, text: str, limit: int) -> int | None:
    """Where the last blank-line break in `text[:limit]` outside code starts (the break
    itself goes with the next message, which drops it)."""
    at = text.rfind("\n\n", 0, limit)
    while at > 0:
        if open_fence(sent + text[:at]) is None:
            return at
        at = text.rfind("\n\n", 0, at)
    return None
