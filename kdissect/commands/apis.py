"""`kdissect apis`: every Kafka API the protocol tables know, with version ranges."""

from __future__ import annotations

import json

import click

from kdissect.shared.options import Options, click_command, flag
from kdissect.protocol.schema import api_keys, api_versions


class ApisOptions(Options):
    """List every Kafka API (key, name, request and response versions)."""

    as_json: bool = flag("--json", help="Print a JSON list instead of a table.")


def api_table() -> list[dict]:
    """One entry per api key: key, name and request/response [min, max] versions."""
    rows = []
    for key in api_keys():
        info = api_versions(key)
        rows.append({
            "api_key": key,
            "name": info.name,
            "request_versions": list(info.request) if info.request else None,
            "response_versions": list(info.response) if info.response else None,
        })
    return rows


def _span(span: list[int] | None) -> str:
    if not span:
        return "-"
    return f"{span[0]}-{span[1]}" if span[0] != span[1] else str(span[0])


def apis(options: ApisOptions) -> None:
    """List every Kafka API (key, name, request and response versions)."""
    rows = api_table()
    if options.as_json:
        click.echo("[\n" + ",\n".join(" " + json.dumps(row) for row in rows) + "\n]")
        return
    width = max(len(row["name"]) for row in rows)
    click.echo(f"{'key':>4}  {'name':<{width}}  {'request':>8}  {'response':>8}")
    for row in rows:
        click.echo(f"{row['api_key']:>4}  {row['name']:<{width}}  {_span(row['request_versions']):>8}  "
                   f"{_span(row['response_versions']):>8}")


command = click_command("apis", ApisOptions, apis)
