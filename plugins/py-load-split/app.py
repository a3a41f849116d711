"""The component: exports `chitin:policy/split@0.1.0` (world `split-policy`).

`componentize-py` generates the `wit_world` bindings from
`wit/since_v0.1.0` at build time (see build.sh); the logic is in
`load_split.py`, which tests run without WebAssembly.
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import split
from wit_world.imports import types

import load_split

_STATES = {
    types.ShardState.ACTIVE: "active",
    types.ShardState.SPLITTING: "splitting",
    types.ShardState.ACTIVATING: "activating",
    types.ShardState.INACTIVE: "inactive",
}


class _Shard:
    def __init__(self, shard: types.Shard):
        self.id, self.lower, self.upper = shard.id, shard.lower, shard.upper
        self.state = _STATES[shard.state]


class Split(exports.Split):
    def split_points(self, request: split.SplitRequest) -> list[int]:
        try:
            return load_split.split_points(_Shard(request.shard), request.children, request.at, request.samples)
        except load_split.Refusal as refusal:
            if refusal.kind == "invalid-input":
                raise Err(types.PolicyError_InvalidInput(refusal.message))
            raise Err(types.PolicyError_InvalidSplit(refusal.message))
