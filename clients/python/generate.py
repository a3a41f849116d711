"""Generates the gRPC stubs of the node API (proto/chitin.proto) into
chitin_client/proto/ with grpcio-tools.

    python clients/python/generate.py          # regenerate (commit the result)
    python clients/python/generate.py --check  # exit 1 when the stubs are stale

The proto is compiled as `chitin_client/proto/chitin.proto`, so the
generated code imports its sibling as `chitin_client.proto.chitin_pb2`.
The stubs are committed (an installed package needs no generator); the test
suite runs --check, so a changed proto without regenerated stubs fails.
"""

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE.parent.parent / "proto" / "chitin.proto"
OUT = HERE / "chitin_client" / "proto"
GENERATED = ("chitin_pb2.py", "chitin_pb2.pyi", "chitin_pb2_grpc.py")


def generate(into: Path) -> None:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as src:
        staged = Path(src) / "chitin_client" / "proto"
        staged.mkdir(parents=True)
        shutil.copy(PROTO, staged / "chitin.proto")
        into.mkdir(parents=True, exist_ok=True)
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{src}",
                f"--python_out={into}",
                f"--pyi_out={into}",
                f"--grpc_python_out={into}",
                str(staged / "chitin.proto"),
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed ({code}) on {PROTO}")


def main(argv) -> int:
    if argv[1:] == ["--check"]:
        with tempfile.TemporaryDirectory() as out:
            generate(Path(out))
            made = Path(out) / "chitin_client" / "proto"
            stale = [n for n in GENERATED if not (OUT / n).exists() or not filecmp.cmp(made / n, OUT / n, shallow=False)]
        if stale:
            print(
                f"stale stubs in {OUT}: {', '.join(stale)} differ from {PROTO}; "
                f"run `python {Path(__file__).relative_to(HERE.parent.parent)}` and commit them",
                file=sys.stderr,
            )
            return 1
        print("stubs are current")
        return 0
    if argv[1:]:
        print(f"usage: {argv[0]} [--check]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as out:
        generate(Path(out))
        for n in GENERATED:
            shutil.copy(Path(out) / "chitin_client" / "proto" / n, OUT / n)
    print(f"wrote {', '.join(GENERATED)} to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
