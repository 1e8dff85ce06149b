"""Every local link in README.md, docs/**/*.md, findings/**/*.md and benchmarks/**/*.md resolves: the file or folder exists, and a
#fragment names a heading of the Markdown file it points into (GitHub's anchors).

    python .ci/check_links.py [ROOT]     one line per broken link, exit 1 if any

Links are [text](target), ![alt](target) and reference definitions `[name]: target`, outside code
blocks and code spans; targets with a scheme (https:, mailto:) are not local and not checked.
"""

import os
import re
import sys
from pathlib import Path

INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, code spans blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, CODE_SPAN.sub("", line)


def anchors(path):
    """GitHub's heading anchors of a Markdown file: lower case, punctuation dropped, spaces to hyphens,
    repeats numbered."""
    seen, found = {}, set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_targets(text):
    """[(line number, target)] of the links in Markdown `text`: inline ones read over the prose as a whole, so a
    link whose text wraps onto the next line counts (its line: where its target stands); reference definitions
    per line."""
    lines = list(prose_lines(text))
    prose = "\n".join(line for _, line in lines)
    starts, offset = [], 0
    for _, line in lines:
        starts.append(offset)
        offset += len(line) + 1
    found = []
    for match in INLINE.finditer(prose):
        index = max(i for i, start in enumerate(starts) if start <= match.start(1))
        found.append((lines[index][0], match.group(1)))
    found += [(number, target) for number, line in lines for target in REFERENCE.findall(line)]
    return found


def broken_links(markdown):
    """[(line number, target, why)] of the local links in `markdown` (a Path) that do not resolve."""
    broken = []
    for number, target in link_targets(markdown.read_text(encoding="utf-8")):
        if SCHEME.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (markdown.parent / path_part).resolve() if path_part else markdown
        if not resolved.exists():
            broken.append((number, target, "no such file or folder"))
        elif fragment and resolved.suffix == ".md" and fragment.lower() not in anchors(resolved):
            broken.append((number, target, f"no heading #{fragment} in {resolved.name}"))
    return broken


def markdown_files(root):
    root = Path(root)
    return [root / "README.md", *(path for folder in ("docs", "findings", "benchmarks") if (root / folder).is_dir()
                                  for path in sorted((root / folder).rglob("*.md")))]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[1])
    problems = 0
    for markdown in markdown_files(root):
        for number, target, why in broken_links(markdown):
            print(f"{os.path.relpath(markdown, root)}:{number}: broken link {target} ({why})", file=sys.stderr)
            problems += 1
    if problems:
        print(f"{problems} broken local link(s) in README.md, docs/ and findings/", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
