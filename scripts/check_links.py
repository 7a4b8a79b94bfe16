#!/usr/bin/env python3
"""Checks that every relative link in README.md and docs/ resolves.

    python3 scripts/check_links.py [FILE_OR_DIR ...]     (default: README.md docs)

For each Markdown file it reads the inline links and images ([text](target), ![alt](target)),
reference definitions ([label]: target) and the href/src of inline HTML, outside code blocks and
code spans. A target with a scheme (https:, mailto:) is skipped. Every other target must:

  - name a file or folder that exists, inside the repository (a link that leaves it, such as
    ../shared/..., is broken: a clone cannot resolve it);
  - when it has an #anchor and names a Markdown file (or is #anchor alone, in the same file),
    match a heading of that file by GitHub's rule (lower case; every character that is not a
    letter, digit, space, '-' or '_' dropped; spaces to '-'; a repeated heading gets -1, -2, ...)
    or an HTML id/name in it; #L<n> and #L<n>-L<m> on any other file must be lines it has.

Prints one line per broken link, "FILE:LINE: TARGET: why", and exits 1 if there is any; 0
otherwise. Standard library only.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.parse
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TARGETS = ("README.md", "docs")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"""<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.I)
HTML_ID = re.compile(r"""<[a-z][^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L(\d+)(?:-L(\d+))?$")


def strip_code_spans(line: str) -> str:
    """The line with every `code span` blanked (same length, so columns stay), as CommonMark
    matches them: a run of n backticks closes at the next run of exactly n."""
    out, i = [], 0
    while i < len(line):
        if line[i] != "`":
            out.append(line[i])
            i += 1
            continue
        j = i
        while j < len(line) and line[j] == "`":
            j += 1
        run = line[i:j]
        k = j
        close = -1
        while k < len(line):
            if line[k] == "`":
                m = k
                while m < len(line) and line[m] == "`":
                    m += 1
                if m - k == len(run):
                    close = k
                    break
                k = m
            else:
                k += 1
        if close < 0:  # no closing run: the backticks are literal
            out.append(run)
            i = j
            continue
        out.append(" " * (close + len(run) - i))
        i = close + len(run)
    return "".join(out)


def prose_lines(text: str) -> Iterator[Tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block) for every line."""
    fence: Optional[str] = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            yield number, line, True
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and \
                    not line.strip()[len(m.group(1)):].strip():
                fence = None
            yield number, line, True
            continue
        yield number, line, False


def inline_targets(line: str) -> Iterator[str]:
    """Targets of [text](target) and ![alt](target) on a line without code spans. Link text may
    hold brackets (an image inside a link, `[a [b] c](x)`); the target may be <...> or carry a
    "title"."""
    i = 0
    while True:
        i = line.find("](", i)
        if i < 0:
            return
        j = i + 2
        while j < len(line) and line[j] in " \t":
            j += 1
        if j < len(line) and line[j] == "<":
            end = line.find(">", j)
            if end < 0:
                i = j
                continue
            yield line[j + 1:end]
            i = end
            continue
        depth, k = 0, j
        while k < len(line):
            c = line[k]
            if c == "\\":
                k += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c in " \t" and depth == 0:
                break  # a title follows
            k += 1
        target = line[j:k]
        if target:
            yield target
        i = k


def heading_text(raw: str) -> str:
    """A heading's text as GitHub renders it, before the slug: links and images reduced to their
    text, code spans to their content, emphasis markers and HTML tags dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"(`+)(.+?)\1", lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"\*+", "", text)
    text = re.sub(r"(?<![\w])_+|_+(?![\w])", "", text)  # _emphasis_, not snake_case
    return text.strip()


def slug(text: str) -> str:
    s = heading_text(text).lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


_anchor_cache: Dict[str, Set[str]] = {}


def anchors_of(path: str) -> Set[str]:
    """Every anchor GitHub makes for the Markdown file at path: heading slugs (repeats get -1,
    -2, ...) and the ids and names of inline HTML."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found: Set[str] = set()
    counts: Dict[str, int] = {}

    def add(title: str) -> None:
        base = slug(title)
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")

    previous: Optional[str] = None
    for _, line, in_code in prose_lines(text):
        if in_code:
            previous = None
            continue
        m = ATX.match(line)
        if m:
            title = re.sub(r"[ \t]+#+$", "", m.group(2) or "")
            add(title)
            previous = None
            continue
        s = SETEXT.match(line)
        if s and previous is not None and previous.strip() and "|" not in previous \
                and not previous.lstrip().startswith(("-", "*", "+", ">")):
            add(previous.strip())
            previous = None
            continue
        for anchor in HTML_ID.findall(line):
            found.add(anchor)
        previous = line
    _anchor_cache[path] = found
    return found


def line_count(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def check_target(source: str, target: str) -> Optional[str]:
    """Why target, written in the file source, does not resolve; None when it does."""
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part)
    anchor = urllib.parse.unquote(anchor)
    if path_part:
        if path_part.startswith("/"):
            resolved = os.path.normpath(os.path.join(ROOT, path_part.lstrip("/")))
        else:
            resolved = os.path.normpath(os.path.join(os.path.dirname(source), path_part))
        if os.path.commonpath([ROOT, resolved]) != ROOT:
            return "points outside the repository"
        if not os.path.exists(resolved):
            return "no such file or folder"
    else:
        resolved = source
    if not anchor:
        return None
    if os.path.isdir(resolved):
        readme = os.path.join(resolved, "README.md")
        if not os.path.isfile(readme):
            return f"#{anchor} on a folder without a README.md"
        resolved = readme
    if resolved.endswith((".md", ".markdown")):
        if anchor.lower() not in {a.lower() for a in anchors_of(resolved)}:
            return f"no heading or anchor '#{anchor}' in {os.path.relpath(resolved, ROOT)}"
        return None
    m = LINE_ANCHOR.match(anchor)
    if m:
        lines = line_count(resolved)
        last = int(m.group(2) or m.group(1))
        if int(m.group(1)) < 1 or last > lines:
            return f"#{anchor}: {os.path.relpath(resolved, ROOT)} has {lines} lines"
    return None  # anchors into other kinds of file are not checked


def links_of(path: str) -> Iterator[Tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for number, line, in_code in prose_lines(text):
        if in_code:
            continue
        if line.startswith(("    ", "\t")) and not line.lstrip().startswith(("-", "*", "+", "|")) \
                and not re.match(r"\s*\d+[.)]\s", line):
            continue  # an indented code block (a list item's continuation keeps its links)
        prose = strip_code_spans(line)
        m = REF_DEF.match(prose)
        if m:
            yield number, m.group(1).strip("<>")
            continue
        for target in inline_targets(prose):
            yield number, target
        for target in HTML_ATTR.findall(prose):
            yield number, target


def markdown_files(targets: List[str]) -> List[str]:
    files: List[str] = []
    for t in targets:
        path = t if os.path.isabs(t) else os.path.join(ROOT, t)
        if os.path.isdir(path):
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files += [os.path.join(folder, n) for n in sorted(names) if n.endswith((".md", ".markdown"))]
        elif os.path.isfile(path):
            files.append(path)
        else:
            print(f"check_links: {t}: no such file or folder", file=sys.stderr)
            sys.exit(2)
    return files


def main(argv: List[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    files = markdown_files(argv or list(DEFAULT_TARGETS))
    broken = checked = 0
    for path in files:
        for number, target in links_of(path):
            checked += 1
            why = check_target(path, target)
            if why:
                broken += 1
                print(f"{os.path.relpath(path, ROOT)}:{number}: {target}: {why}")
    summary = f"check_links: {checked} links in {len(files)} files, {broken} broken"
    print(summary, file=sys.stderr if broken else sys.stdout)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
