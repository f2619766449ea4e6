"""Regenerates the committed gRPC stubs from api.proto (`make protos`), or checks for drift.

The stubs are committed so the exporter needs no code generator at run time; a test runs this with
--check to prove they still match the .proto.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO = Path("kube_gpu_exporter/exporter/podresources/v1/api.proto")
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(ROOT / PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def drifted() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh_dir = Path(tmp) / PROTO.parent
        return [
            name
            for name in OUTPUTS
            if (fresh_dir / name).read_bytes() != (ROOT / PROTO.parent / name).read_bytes()
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the stubs are out of date")
    args = parser.parse_args()
    if args.check:
        stale = drifted()
        if stale:
            sys.exit(f"stale generated stubs: {', '.join(stale)}; run `make protos`")
        print("generated stubs match api.proto")
        return
    generate(ROOT)
    print(f"regenerated {', '.join(OUTPUTS)}")


if __name__ == "__main__":
    main()
