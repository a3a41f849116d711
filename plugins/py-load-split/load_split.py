"""Load-aware split points, in plain Python (no WebAssembly, no bindings).

The same policy as the Rust example `plugins/load-split`: the k-th split
point is where the cumulative ops/s of the samples reaches k/children of the
total, assuming a sample's load is spread evenly over its keys. Without
samples (or with no load) the range is cut into equal parts, and an explicit
point from the operator wins. Refusals carry the default policy's messages,
so both implementations pass the same fixtures.

`app.py` wraps this module into the `chitin:policy/split@0.1.0` interface.
"""

import math


class Refusal(Exception):
    """The policy refuses the request: `kind` is the policy-error case."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind  # "invalid-split" or "invalid-input"
        self.message = message


def _len(lower, upper):
    return upper - lower + 1


def _range(lower, upper):
    return f"[{lower:08x}, {upper:08x}]"


def even_points(lower, upper, parts):
    total = _len(lower, upper)
    if parts < 2 or total < parts:
        return None
    return [lower + total * i // parts for i in range(1, parts)]


def _clipped(samples, lower, upper):
    out = []
    for s in samples:
        if s.lower > s.upper or s.upper < lower or s.lower > upper:
            continue
        if not math.isfinite(s.ops_per_sec) or s.ops_per_sec <= 0:
            continue
        l, u = max(s.lower, lower), min(s.upper, upper)
        out.append((l, u, s.ops_per_sec * _len(l, u) / _len(s.lower, s.upper)))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


def load_points(lower, upper, children, samples):
    samples = _clipped(samples, lower, upper)
    total = sum(s[2] for s in samples)
    if total <= 0 or children < 2:
        return None
    points = []
    for k in range(1, children):
        target = total * k / children
        before, point = 0.0, upper
        for l, u, ops in samples:
            if before + ops >= target:
                # Rust's f64::round: half away from zero (values are >= 0).
                point = l + math.floor((target - before) / ops * _len(l, u) + 0.5)
                break
            before += ops
        low = points[-1] + 1 if points else lower + 1
        high = upper + 1 - (children - k)
        if low > high:
            return None
        points.append(min(max(point, low), high))
    return points


def split_points(shard, children, at, samples):
    """The first key of every child but the first, or raises `Refusal`."""
    sid, lower, upper, state = shard.id, shard.lower, shard.upper, shard.state
    if lower > upper:
        raise Refusal("invalid-input", f"shard {sid} has lower bound {lower:08x} above its upper bound {upper:08x}")
    if state != "active":
        raise Refusal("invalid-split", f"shard {sid} is {state}; only an active shard splits")
    if children < 2:
        raise Refusal("invalid-split", f"shard {sid}: a split needs at least 2 children, {children} asked")
    if lower == upper:
        raise Refusal("invalid-split", f"shard {sid} covers the single key {lower:08x}; a one-key range cannot split")
    if at is not None:
        if children != 2:
            raise Refusal("invalid-split", f"shard {sid}: an explicit split point makes 2 children, {children} asked")
        if not lower < at <= upper:
            raise Refusal(
                "invalid-split",
                f"split point {at:08x} is outside shard {sid}'s range {_range(lower, upper)}; "
                "it must satisfy lower < point <= upper",
            )
        return [at]
    even = even_points(lower, upper, children)
    if even is None:
        raise Refusal(
            "invalid-split",
            f"shard {sid} covers {_len(lower, upper)} keys {_range(lower, upper)}, fewer than the {children} children asked",
        )
    return load_points(lower, upper, children, samples) or even
