"""The client's option table through Python (gradex._C, the module
gradex.torch.GradexState hands its keywords to): every keyword and every
environment variable of the table lands in its ClientOptions member with the
table's example value (the same text tests/client/option_table_test.cc gets
through the C ABI and the environment), and is recorded as given; a value
out of range is a ValueError naming the keyword and the range; a wrong type
is a TypeError; an unknown keyword is a TypeError. Also: GradexState's
keywords left out are not given (they ask nothing of the job's plan).
Exit 77 (skip) when the module or torch is missing."""
import os
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401  (gradex.torch needs it)
    from gradex import _C
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)


def from_example(row):
    """The table's example (C ABI text) as the keyword's Python value."""
    text, kind = row["example"], row["type"]
    if kind in ("int", "uint"):
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text == "1"
    if kind == "duration":
        return int(text) / 1000  # Python: seconds
    if kind == "params":
        return {k: float(v) for k, v in (p.split("=") for p in text.split(","))}
    return text


def number_text(x):
    return repr(int(x)) if float(x).is_integer() else repr(x)


class OptionTableTest(unittest.TestCase):
    def setUp(self):
        self.table = _C.option_table()
        self.clear_env()

    def tearDown(self):
        self.clear_env()

    def clear_env(self):
        for row in _C.option_table():
            for name, _ in row["env"]:
                os.environ.pop(name, None)

    def test_the_table(self):
        names = [r["name"] for r in self.table]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual({r["name"] for r in self.table if r["plan_decided"]},
                         {"algorithm", "density", "teams", "params"})
        defaults, _ = _C._parsed_options({})
        for r in self.table:
            self.assertEqual(defaults[r["name"]], r["default"], r["name"])
            self.assertNotEqual(r["example"], r["default"], r["name"])

    def test_every_keyword_lands_in_its_member(self):
        defaults, _ = _C._parsed_options({})
        keywords = 0
        for r in self.table:
            if not r["py_keyword"]:
                continue
            keywords += 1
            kw = r["py_keyword"]
            values, given = _C._parsed_options({kw: from_example(r)})
            self.assertEqual(values[r["name"]], r["example"], kw)
            self.assertEqual(given, {r["name"]: f"keyword {kw}"}, kw)
            changed = {n for n in values if values[n] != defaults[n]}
            self.assertEqual(changed, {r["name"]}, kw)
        self.assertGreaterEqual(keywords, 25)
        # None is "not given".
        self.assertEqual(_C._parsed_options({"density": None})[1], {})

    def test_every_environment_variable_lands_in_its_member(self):
        count = 0
        for r in self.table:
            for name, is_file in r["env"]:
                count += 1
                self.clear_env()
                if r["name"] == "rank":
                    os.environ["WORLD_SIZE"] = "65536"  # RANK is checked against it
                if is_file:
                    f = tempfile.NamedTemporaryFile("w", delete=False)
                    f.write(r["example"])
                    f.close()
                    os.environ[name] = f.name
                else:
                    os.environ[name] = r["example"]
                values, given = _C._parsed_options({}, True)
                self.assertEqual(values[r["name"]], r["example"], name)
                self.assertEqual(given[r["name"]], name)
                if is_file:
                    os.unlink(f.name)
        self.assertEqual(count, 21)  # GRADEX_HIERARCHY and GRADEX_NODE among them
        # The keyword wins over the variable.
        self.clear_env()
        os.environ["GRADEX_PIPELINE"] = "0"
        values, given = _C._parsed_options({"pipeline": True}, True)
        self.assertEqual(values["pipeline"], "1")
        self.assertEqual(given["pipeline"], "keyword pipeline")

    def test_out_of_range_names_the_keyword_and_the_range(self):
        checked = 0
        for r in self.table:
            if r["range"] is None or not r["py_keyword"]:
                continue
            lo, hi, lo_open, hi_open = r["range"]
            kw = r["py_keyword"]
            for bad in (lo if lo_open else lo - 1, hi if hi_open else hi + 1):
                if r["type"] == "duration":
                    bad = bad / 1000
                    want = "seconds in (0, "
                elif r["type"] in ("int", "uint"):
                    bad = int(bad)
                    want = r["expected"]
                else:
                    want = r["expected"]
                with self.assertRaises(ValueError, msg=f"{kw}={bad}") as cm:
                    _C._parsed_options({kw: bad})
                self.assertIn(kw, str(cm.exception))
                self.assertIn(want, str(cm.exception))
                checked += 1
        self.assertGreaterEqual(checked, 20)
        with self.assertRaises(ValueError) as cm:
            _C._parsed_options({"density": 0.0})
        self.assertIn("density", str(cm.exception))
        self.assertIn("(0, 1]", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            _C._parsed_options({"momentum_correction": 1.0})
        self.assertIn("[0, 1)", str(cm.exception))

    def test_wrong_types_and_unknown_keywords(self):
        for kw, v in (("density", "0.1"), ("teams", 1.5), ("algorithm", 3), ("params", {"a": True})):
            with self.assertRaises(TypeError, msg=kw) as cm:
                _C._parsed_options({kw: v})
            self.assertIn(kw, str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            _C._parsed_options({"denisty": 0.1})
        self.assertIn("denisty", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
