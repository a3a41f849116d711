"""Runs fixtures/*.json against load_split.py with plain CPython:
`python3 -m unittest` in this directory. `chitin policy test` runs the same
files against the component."""

import glob
import json
import os
import types
import unittest

import load_split

HERE = os.path.dirname(os.path.abspath(__file__))


def ns(value):
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: ns(v) for k, v in value.items()})
    if isinstance(value, list):
        return [ns(v) for v in value]
    return value


class Fixtures(unittest.TestCase):
    def test_fixtures_hold(self):
        paths = sorted(glob.glob(os.path.join(HERE, "fixtures", "*.json")))
        self.assertGreaterEqual(len(paths), 4)
        for path in paths:
            with self.subTest(fixture=os.path.basename(path)):
                f = json.load(open(path))
                i = f["input"]
                samples = [ns({"keys": 0, "bytes": 0, **s}) for s in i.get("samples", [])]
                shard = ns({"state": "active", "lower": 0, "upper": 0, **i["shard"]})
                try:
                    got = {"ok": load_split.split_points(shard, i["children"], i.get("at"), samples)}
                except load_split.Refusal as r:
                    got = {"error": {r.kind: r.message}}
                self.assertEqual(got, f["expect"])

    def test_the_hot_quarter(self):
        s = [ns({"lower": 0, "upper": 0x3FFFFFFF, "ops_per_sec": 300.0}),
             ns({"lower": 0x40000000, "upper": 0xFFFFFFFF, "ops_per_sec": 100.0})]
        self.assertEqual(load_split.load_points(0, 0xFFFFFFFF, 2, s), [0x2AAAAAAB])


if __name__ == "__main__":
    unittest.main()
