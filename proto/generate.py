"""Regenerate ftrl/wire/ftrl_pb2*.py from proto/ftrl.proto.

Usage: python proto/generate.py [OUT_DIR]   (default: ftrl/wire)
The test tests/unit/wire/test_proto_generated.py runs this into a temp dir and
compares, so generated code can never drift from the .proto file.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) so that imports read `from ftrl.wire import ...`."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    # The proto is mapped to the virtual path ftrl/wire/ftrl.proto so the generated
    # grpc module imports its message module as a package import.
    staging = out_dir / "_staging"
    staging.mkdir(exist_ok=True)
    args = [
        "protoc",
        f"-Iftrl/wire={ROOT / 'proto'}",
        f"--python_out={staging}",
        f"--pyi_out={staging}",
        f"--grpc_python_out={staging}",
        "ftrl/wire/ftrl.proto",
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for name in ("ftrl_pb2.py", "ftrl_pb2.pyi", "ftrl_pb2_grpc.py"):
        (staging / "ftrl" / "wire" / name).replace(out_dir / name)
    for p in sorted(staging.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    staging.rmdir()


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "ftrl" / "wire")
