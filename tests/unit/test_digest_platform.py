"""The learning digests' platform keys (tests/fixtures/digest_platform.py): the exact key,
else the vendor's set, else a skip that names the platform."""

from __future__ import annotations

import json

import pytest

from tests.fixtures import digest_platform
from tests.fixtures.digest_platform import recorded

FIXTURE = {"recorded_at": {}, "platforms": {"AuthenticAMD": {"s": {"k": "amd"}},
                                            "GenuineIntel/AVX512": {"s": {"k": "intel512"}}}}


@pytest.mark.parametrize("key,expected", [("GenuineIntel/AVX512", "intel512"), ("AuthenticAMD/AVX2", "amd"),
                                          ("AuthenticAMD/AVX512", "amd")])
def test_the_exact_platform_else_the_vendor_s_digests(monkeypatch, key, expected):
    monkeypatch.setattr(digest_platform, "platform_key", lambda: key)
    assert recorded(FIXTURE, "s", "k") == expected


@pytest.mark.parametrize("key", ["GenuineIntel/AVX2", "unknown/DEFAULT"])
def test_a_platform_without_digests_skips_naming_itself(monkeypatch, key):
    monkeypatch.setattr(digest_platform, "platform_key", lambda: key)
    with pytest.raises(pytest.skip.Exception, match=key):
        recorded(FIXTURE, "s", "k")


def test_a_key_missing_from_this_platform_s_set_skips_too(monkeypatch):
    monkeypatch.setattr(digest_platform, "platform_key", lambda: "AuthenticAMD/AVX2")
    with pytest.raises(pytest.skip.Exception, match="'other'"):
        recorded(FIXTURE, "s", "other")


def test_a_recording_adds_this_platform_s_set_and_keeps_the_others(monkeypatch, tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(FIXTURE))
    monkeypatch.setattr(digest_platform, "FIXTURES", tmp_path)
    monkeypatch.setattr(digest_platform, "platform_key", lambda: "GenuineIntel/AVX2")
    digest_platform.save("f.json", {"s": {"k": "intel2"}}, "abc123")
    fixture = digest_platform.load("f.json")
    assert recorded(fixture, "s", "k") == "intel2" and fixture["recorded_at"] == {"GenuineIntel/AVX2": "abc123"}
    assert fixture["platforms"]["AuthenticAMD"] == {"s": {"k": "amd"}}
