#!/usr/bin/env python3
"""Keeps the rooms as docs/architecture.md ("Layers") says: no folder holds
more than 40 source files (a larger one is cut into sub-rooms), and
namespaces follow folders: the code of x/y/ is in gradex::x::y (services/ is a shelf, not a room, so
services/client/ is gradex::client), or in that namespace's `internal` or
`detail`. Reads every namespace block a product source opens at the start of
a line; tests, benchmarks, examples and the Python binding keep their own.
Exits 1 naming each block that disagrees, 0 otherwise.

    tests/docs/rooms_check.py ROOT [--self-test]

--self-test also checks that a doctored block is refused."""
import argparse
import os
import re
import sys

OPEN = re.compile(r"(?m)^namespace (gradex[\w:]*) \{")
OWN_NAMESPACES = ("tests", "bench", "examples", "python", "proto")
SOURCE = (".h", ".cc", ".cu", ".cuh")
MAX_FILES = 40


def wanted(folder):
    parts = [p for p in folder.split("/") if p and p != "services"]
    return "::".join(["gradex"] + parts)


def disagreements(path, folder, text):
    want = wanted(folder)
    ok = (want, want + "::internal", want + "::detail")
    return [(path, ns, want) for ns in OPEN.findall(text) if ns not in ok]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    bad, blocks, crowded = [], 0, []
    for dirpath, dirnames, filenames in os.walk(args.root):
        rel = os.path.relpath(dirpath, args.root)
        rel = "" if rel == "." else rel
        top = rel.split("/")[0]
        if rel and (top in OWN_NAMESPACES or top.startswith((".", "build"))):
            dirnames[:] = []
            continue
        sources = [n for n in filenames if n.endswith(SOURCE)]
        if len(sources) > MAX_FILES:
            crowded.append((rel or ".", len(sources)))
        for name in sources:
            text = open(os.path.join(dirpath, name), encoding="utf-8").read()
            blocks += len(OPEN.findall(text))
            bad += disagreements(os.path.join(rel, name), rel, text)
    for folder, n in crowded:
        print(f"rooms_check: {folder}/ holds {n} source files, more than {MAX_FILES}: cut it into "
              "sub-rooms")
    for path, ns, want in bad:
        print(f"rooms_check: {path} opens {ns}; its folder's namespace is {want}")
    print(f"rooms_check: {blocks} namespace blocks, {len(bad)} disagree with their folder")
    if args.self_test:
        doctored = disagreements("pipeline/x.h", "pipeline", "namespace gradex::member {\n")
        fine = disagreements("transport/ucx/x.cc", "transport/ucx",
                             "namespace gradex::transport::ucx {\n")
        if len(doctored) != 1 or fine:
            print(f"rooms_check: self-test failed: {doctored} {fine}")
            return 1
    return 1 if bad or crowded or blocks == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
