"""`kdissect show -v` parses record data on demand: every record the lab's
clients produced (per the capture's manifest) is shown under its Produce."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kdissect.cli import cli


def test_show_verbose_lists_every_produced_record(captures_dir) -> None:
    manifest = json.loads((captures_dir / "produce_acks1.manifest.json").read_text())
    result = CliRunner().invoke(cli, ["show", "-v", "--api", "Produce", str(captures_dir / "produce_acks1.pcap")])
    assert result.exit_code == 0, result.output
    shown = result.output
    produced = [r for r in manifest["produced"] if r["delivered"]]
    assert len(produced) >= 30
    for record in produced:
        if record["key"] is not None and not record["key"].startswith("base64:"):
            assert f"key '{record['key']}'" in shown, record
    for codec in {r["codec"] for r in produced}:
        assert f"magic 2, {codec}, crc ok" in shown, codec
