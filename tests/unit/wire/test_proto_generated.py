"""The committed ftrl/wire/ftrl_pb2*.py* files must match what proto/generate.py makes."""

from __future__ import annotations

import importlib.util

import pytest

from tests.procs import REPO

GENERATED = ("ftrl_pb2.py", "ftrl_pb2.pyi", "ftrl_pb2_grpc.py")


def _generate_module():
    spec = importlib.util.spec_from_file_location("ftrl_proto_generate", REPO / "proto" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_matches_the_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    _generate_module().generate(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(GENERATED)
    for name in GENERATED:
        fresh = (tmp_path / name).read_text()
        committed = (REPO / "ftrl" / "wire" / name).read_text()
        assert fresh == committed, (
            f"ftrl/wire/{name} is out of date with proto/ftrl.proto: run `python proto/generate.py`"
        )


def test_generated_grpc_module_imports_the_package():
    text = (REPO / "ftrl" / "wire" / "ftrl_pb2_grpc.py").read_text()
    assert "from ftrl.wire import ftrl_pb2" in text
