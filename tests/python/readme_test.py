"""The README cannot drift: what it shows is run, taken from README.md itself.

- Its shape: at most 250 lines; the install and test commands (the Quick
  start block) and the PyTorch snippet within the first 60.
- The snippet (the first ```python block): run on 2 ranks with
  scripts/launch, a few steps of a small model around it, the gradient
  exchanged through gradex (every rank's parameters equal at the end).
- Every `scripts/...` it names exists and is executable; every `gradex-...`
  binary it names exists in the build and answers --version and --help.
- Every relative link resolves: the file exists, and a #anchor names one
  of its headings (GitHub's slugs).

    readme_test.py --root DIR --bin-dir DIR
Exits 77 (skipped) where the Python running it has no torch.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = BIN = None

# Around the snippet: what it leaves to the reader (a model `net`, data,
# a training loop), kept apart from the snippet so that the snippet runs as
# the README prints it.
PRELUDE = """
import os, sys, torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
"""
EPILOGUE = """
rank = dist.get_rank()
gen = torch.Generator().manual_seed(100 + rank)
for step in range(6):
    x = torch.randn(16, 32, generator=gen)
    y = torch.randint(0, 4, (16,), generator=gen)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, flat)
same = all(torch.equal(g, gathered[0]) for g in gathered)
calls = sum(b["calls"] for b in state.stats())
state.close()
print(f"readme snippet: rank {rank} identical {same} calls {calls}", flush=True)
sys.exit(0 if same and calls > 0 else 1)
"""


def slug(heading):
    """GitHub's anchor of a markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


class ReadmeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "README.md")) as f:
            cls.text = f.read()
        cls.lines = cls.text.split("\n")

    def first_line_of(self, needle):
        for i, line in enumerate(self.lines):
            if needle in line:
                return i + 1
        self.fail(f"README.md has no line with {needle!r}")

    def test_shape(self):
        self.assertLessEqual(len(self.lines), 251, "README.md is over 250 lines")
        quick = self.first_line_of("## Quick start")
        self.assertLessEqual(self.first_line_of("scripts/test"), 60)
        self.assertLess(quick, 60)
        self.assertLessEqual(self.first_line_of("register_comm_hook"), 60)

    def snippet(self):
        m = re.search(r"```python\n(.*?)```", self.text, re.S)
        self.assertIsNotNone(m, "README.md has no python block")
        return m.group(1)

    def test_the_snippet_runs_on_two_ranks(self):
        script = PRELUDE + self.snippet() + EPILOGUE
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(script)
            path = f.name
        try:
            env = dict(os.environ)
            env.pop("GRADEX_COORDINATOR", None)
            r = subprocess.run(
                [os.path.join(ROOT, "scripts/launch"), "-n", "2", "--timeout-s", "150", "--",
                 sys.executable, path],
                env=env, capture_output=True, text=True, timeout=180)
        finally:
            os.unlink(path)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-3000:])
        self.assertEqual(out.count("identical True"), 2, out[-3000:])

    def test_every_script_it_names_exists(self):
        names = set(re.findall(r"\bscripts/[\w.-]+", self.text))
        self.assertIn("scripts/test", names)
        for name in sorted(names):
            path = os.path.join(ROOT, name)
            self.assertTrue(os.access(path, os.X_OK), f"README names {name}: not an executable")

    def test_every_binary_it_names_answers_version_and_help(self):
        names = set(re.findall(r"`(gradex-[a-z-]+)", self.text))
        self.assertIn("gradex-coordinator", names)
        for name in sorted(names):
            path = os.path.join(BIN, name)
            self.assertTrue(os.access(path, os.X_OK), f"README names {name}: not in {BIN}")
            for flag in ("--version", "--help"):
                r = subprocess.run([path, flag], capture_output=True, text=True, timeout=30)
                out = r.stdout + r.stderr
                # absl's flags (gradex-transport-bench) end --help with status 1.
                ok = r.returncode == 0 or (flag == "--help" and r.returncode == 1)
                self.assertTrue(ok, f"{name} {flag}: status {r.returncode}: {out[-500:]}")
                self.assertIn(name, out, f"{name} {flag} does not name itself")

    def test_every_relative_link_resolves(self):
        for target in re.findall(r"\]\(([^)\s]+)\)", self.text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.join(ROOT, path) if path else os.path.join(ROOT, "README.md")
            self.assertTrue(os.path.exists(full), f"README links {target}: no {path}")
            if anchor and full.endswith(".md"):
                with open(full) as f:
                    slugs = {slug(m) for m in re.findall(r"^#+ (.*)$", f.read(), re.M)}
                self.assertIn(anchor, slugs, f"README links {target}: no such heading")


def main():
    global ROOT, BIN
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--bin-dir", required=True)
    args, rest = p.parse_known_args()
    ROOT, BIN = os.path.abspath(args.root), os.path.abspath(args.bin_dir)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("readme_test: no torch in this Python: skipped")
        return 77
    r = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    return 0 if r.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
