#!/usr/bin/env python3
"""Every link of README.md and docs/*.md resolves, and every repository path they name in
`inline code` exists: a file that moves or goes breaks this test, not the reader.

    tests/tools/doc_links.py [SOURCE_DIR]      (default: the repository this file is in)

Checked: the targets of [text](target) and ![alt](target) that are not URLs or anchors
(relative to the page, '#fragment' dropped), and the words of inline code spans that start with
one of the repository's top-level folders (`scripts/gpu/test.sh`, `tests/fuzz.sh --ci`),
relative to the repository. Words with wildcards or placeholders (`docs/report-oom*.png`,
`vramtrace.<pid>.vtrace`, `$ROOT/...`) and fenced code blocks (examples of output, whose paths are
the user's) are not checked. Prints each broken one as FILE:LINE: what; exits 1 if any."""
import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# The folders whose paths the pages name; build outputs (build/, gpu-out/) are not among them.
FOLDERS = ("bench", "cli", "cmake", "collector", "common", "docs", "examples", "include",
           "interpose", "python", "report", "scripts", "standin", "tests", ".ci")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"(`+)(.+?)\1")
PLACEHOLDER = re.compile(r"[*?<>{}\[\]$%]|\.\.\.")


def pages():
    yield os.path.join(ROOT, "README.md")
    yield from sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def broken(path):
    here = os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fenced = False
    for n, line in enumerate(lines):  # fenced blocks blanked, so that line numbers stay
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines[n] = ""
        elif fenced:
            lines[n] = ""
    text = "\n".join(lines)
    for m in LINK.finditer(text):  # a link's text may run over two lines
        target = m.group(1)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0]
        if not os.path.exists(os.path.normpath(os.path.join(here, file))):
            yield text.count("\n", 0, m.start()) + 1, f"link to {target}: no such file"
    for n, line in enumerate(lines, 1):
        for _, span in CODE.findall(line):
            for word in span.split():
                word = word.rstrip(".,;:)'\"").lstrip("('\"")
                if "/" not in word or word.split("/", 1)[0] not in FOLDERS:
                    continue
                if PLACEHOLDER.search(word):
                    continue
                if not os.path.exists(os.path.join(ROOT, word)):
                    yield n, f"`{word}`: no such file or folder"


def main():
    failures = 0
    checked = 0
    for page in pages():
        checked += 1
        for n, what in broken(page):
            failures += 1
            print(f"{os.path.relpath(page, ROOT)}:{n}: {what}")
    print(f"{checked} pages, {failures} broken")
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
