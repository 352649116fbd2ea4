#!/usr/bin/python3
"""Every relative link of the repository's Markdown resolves inside the repository.

usage: /usr/bin/python3 tests/lint/doc_links.py [ROOT]   (ROOT: the repository, default ../..)

Checks every *.md under ROOT (skipping build*/, hidden folders, demo/ and __pycache__/):
- a relative link [text](path) or [text](path#anchor), an image, or a reference
  definition `[x]: path` names a file or folder that exists and lies inside ROOT
  (after resolving `..` and symbolic links);
- an anchor (`path.md#anchor` or `#anchor`) is a heading of the target file, as GitHub
  makes heading ids (lowercase, punctuation dropped, spaces to '-', -1, -2 for repeats),
  or an explicit <a name=...> / id=...;
- no link is absolute (/path, file:), a mailto:, or another scheme; http(s) is allowed;
- no file mentions ../shared/ (a folder a clone of the repository does not have);
- README.md has at most 150 lines.
Links inside fenced code blocks and `code spans` are not links and are skipped.
Exit 0 when all hold, else 1 with one line per problem (FILE:LINE: ...).
"""
import os
import re
import sys
import urllib.parse

README_MAX_LINES = 150
SKIP_DIRS = {"demo", "__pycache__", "node_modules"}

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"""<[^>]*\b(?:id|name)\s*=\s*["']([^"']+)["']""")


def md_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("build") and x not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def lines_outside_code(text, blank_spans=True):
    """(line number, line) of every line not in a fenced code block, code spans blanked."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line) if blank_spans else line


def slug(heading):
    """GitHub's id of a heading: the rendered text, lowercased, punctuation dropped, spaces to '-'."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links -> their text
    parts = re.split(r"(`+[^`]*`+)", t)                    # code spans keep <...> as text
    t = "".join(p.strip("`") if p.startswith("`") else re.sub(r"<[^>]+>", "", p) for p in parts)
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)                          # \w: unicode letters, digits, _
    return t.replace(" ", "-")


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        seen, ids = {}, set()
        text = open(path, encoding="utf-8").read()
        for _, line in lines_outside_code(text, blank_spans=False):
            m = HEADING.match(line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                ids.add(s if k == 0 else f"{s}-{k}")
        for m in HTML_ID.finditer(text):
            ids.add(m.group(1))
        _anchor_cache[path] = ids
    return _anchor_cache[path]


def check_file(root, path, problems):
    rel = os.path.relpath(path, root)
    text = open(path, encoding="utf-8").read()
    if "../shared/" in text:
        n = text[: text.index("../shared/")].count("\n") + 1
        problems.append(f"{rel}:{n}: mentions ../shared/, which a clone of the repository does not have")
    links = 0
    for n, line in lines_outside_code(text):
        targets = [m.group(1) for m in INLINE.finditer(line)]
        m = REFDEF.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            links += 1
            target = target.strip("<>")
            where = f"{rel}:{n}: {target}"
            scheme = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", target)
            if scheme:
                if scheme.group(1).lower() not in ("http", "https"):
                    problems.append(f"{where}: {scheme.group(1)}: links are not allowed (relative paths or http(s) only)")
                continue
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            if file_part.startswith("/"):
                problems.append(f"{where}: absolute path; use a path relative to {rel}")
                continue
            dest = os.path.realpath(os.path.join(os.path.dirname(path), file_part)) if file_part else os.path.realpath(path)
            if os.path.commonpath([dest, os.path.realpath(root)]) != os.path.realpath(root):
                problems.append(f"{where}: points outside the repository ({dest})")
                continue
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file or folder ({os.path.relpath(dest, root)})")
                continue
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    continue  # GitHub's line anchors (#L10) and the like: not checked
                if urllib.parse.unquote(anchor) not in anchors(dest):
                    problems.append(f"{where}: no heading #{anchor} in {os.path.relpath(dest, root)}")
    return links


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    problems, files, links = [], 0, 0
    for path in md_files(root):
        files += 1
        links += check_file(root, path, problems)
    readme = os.path.join(root, "README.md")
    if not os.path.exists(readme):
        problems.append("README.md: missing")
    else:
        count = len(open(readme, encoding="utf-8").read().rstrip("\n").split("\n"))
        if count > README_MAX_LINES:
            problems.append(f"README.md: {count} lines, more than {README_MAX_LINES} (move the detail to docs/)")
    for p in problems:
        print(p)
    print(f"doc_links: {files} Markdown files, {links} links, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
