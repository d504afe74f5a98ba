#!/usr/bin/env python3
"""Extracts the shell blocks of deploy/README.md's "From two bare hosts to a dashboard" for
scripts/walkthrough-test.sh, which runs them as written on network namespaces standing in for the
hosts.

Every ```sh block in that section starts with a comment naming the hosts it runs on
(`# on sink-1, load-1`). A later line whose comment says `# on HOST` runs on that host only (the
step-1 `ringblast topo` line). Writes one file per block and host, DIR/NN-STEP-HOST.sh, in the
page's order, and prints their names; exits 1, naming the line, when a block names no hosts.

Usage: walkthrough_blocks.py README DIR
"""
import os
import re
import sys

HOSTS = ("sink-1", "load-1", "mon-1")
SECTION = "## From two bare hosts to a dashboard"
ON = re.compile(r"#\s*on ((?:sink-1|load-1|mon-1)(?:(?:,| and) (?:sink-1|load-1|mon-1))*)\b")


def blocks(text):
    """(step, first line number, lines) of each sh block in the section."""
    lines = text.splitlines()
    start = lines.index(SECTION)
    step, block, first = None, None, 0
    for number, line in enumerate(lines[start + 1:], start + 2):
        if block is None and line.startswith("## "):
            break
        heading = re.match(r"### (\d+)\. ", line)
        if heading and block is None:
            step = int(heading.group(1))
        if block is None and line.strip() == "```sh":
            block, first = [], number + 1
        elif block is not None and line.strip() == "```":
            yield step, first, block
            block = None
        elif block is not None:
            block.append(line)


def main():
    readme, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    count = 0
    for step, first, lines in blocks(open(readme).read()):
        head = ON.match(lines[0].strip()) if lines else None
        if step is None or not head:
            sys.exit(f"{readme}:{first}: a walkthrough block must start with '# on HOST[, HOST]' (one of {HOSTS})")
        hosts = re.split(r", | and ", head.group(1))
        for host in hosts:
            kept = []
            for line in lines[1:]:
                only = ON.search(line)
                if only and host not in re.split(r", | and ", only.group(1)):
                    continue
                kept.append(line)
            count += 1
            name = f"{count:02d}-step{step}-{host}.sh"
            with open(os.path.join(out, name), "w") as f:
                f.write(f"# {readme}:{first} (step {step}), on {host}\n" + "\n".join(kept) + "\n")
            print(name)
    if count == 0:
        sys.exit(f"{readme}: no sh blocks under '{SECTION}'")


if __name__ == "__main__":
    main()
