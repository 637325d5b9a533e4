#!/usr/bin/env python3
"""Keeps docs/architecture.md's "The walk of one bucket" true: every file it
names exists. A name with a folder is taken from the repository's root; a
bare name is looked up in the folder of the last path named before it in
the walk. Exits 1 naming each file that is not there (renamed or removed:
update the walk), 0 otherwise.

    tests/docs/walk_check.py ROOT [--self-test]

--self-test also checks that a walk naming a missing file fails."""
import argparse
import os
import re
import sys

SECTION = "## The walk of one bucket"
NAME = re.compile(r"`([\w./-]+\.(?:cc|cu|h|py))`")


def walk_text(doc):
    start = doc.index(SECTION)
    end = doc.find("\n## ", start + len(SECTION))
    return doc[start:end if end >= 0 else len(doc)]


def missing(root, text):
    folder, bad, named = "", [], 0
    for name in NAME.findall(text):
        named += 1
        path = name if "/" in name else os.path.join(folder, name)
        if "/" in name:
            folder = os.path.dirname(name)
        if not os.path.isfile(os.path.join(root, path)):
            bad.append(path)
    return named, bad


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    doc = open(os.path.join(args.root, "docs", "architecture.md"), encoding="utf-8").read()
    text = walk_text(doc)
    named, bad = missing(args.root, text)
    for path in bad:
        print(f"walk_check: docs/architecture.md's walk names {path}, which is not there "
              "(renamed or removed? update the walk)")
    print(f"walk_check: {named} files named, {len(bad)} missing")
    if args.self_test:
        _, doctored = missing(args.root, text + "\n`collectives/no_such_file.cc`, `gone.cc`\n")
        if doctored[-2:] != ["collectives/no_such_file.cc", "collectives/gone.cc"]:
            print(f"walk_check: self-test: a doctored walk was not refused: {doctored}")
            return 1
    return 1 if bad or named == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
