"""The vendored chart JavaScript (kdissect/report/vendor/) is the npm packages'
files, unchanged, with their licences, at the Vega-Lite version altair writes
specs for; the page inlines exactly them."""

from __future__ import annotations

import hashlib
import re

from kdissect.report import bundle

README = bundle.VENDOR / "README.md"


def test_files_match_the_recorded_checksums():
    recorded = dict((name, digest) for digest, name in re.findall(r"^\s+([0-9a-f]{64})  (\S+)$",
                                                                  README.read_text(), re.MULTILINE))
    assert set(recorded) == set(bundle.FILES)
    for name in bundle.FILES:
        assert hashlib.sha256((bundle.VENDOR / name).read_bytes()).hexdigest() == recorded[name], name


def test_each_package_has_its_licence():
    for package in ("vega", "vega-lite", "vega-embed"):
        text = (bundle.VENDOR / f"LICENSE.{package}").read_text()
        assert "Redistribution and use in source and binary forms" in text, package


def test_vega_lite_is_the_version_altair_writes_for():
    import altair

    assert altair.SCHEMA_VERSION == f"v{bundle.VEGA_LITE_VERSION}"
    # the build says its own version (vega-lite's `version` export)
    assert f'"{bundle.VEGA_LITE_VERSION}"' in (bundle.VENDOR / "vega-lite.min.js").read_text()


def test_the_bundle_is_the_three_files_and_safe_in_a_script_element():
    source = bundle.javascript()
    assert "</script" not in source.lower()
    for name in bundle.FILES:
        assert (bundle.VENDOR / name).read_text()[:2000] in source
    assert source.endswith("window.kdissectEmbed = vegaEmbed;")
