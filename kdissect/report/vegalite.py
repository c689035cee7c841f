"""Vega-Lite specs spelled as altair spells them, without altair.

The report's charts (`kdissect.report.charts`) are written with altair's
names (`Chart(...).mark_bar().encode(x=X("f:Q", axis=Axis(...)))`, `+` for
layers, `properties`, `transform_filter`, `resolve_scale`, `configure_*`);
this module builds the same Vega-Lite dict from them in plain Python. Why:
importing altair costs about 50 MB of memory (it loads jsonschema and
Vega-Lite's whole schema), more than `kdissect export`'s whole peak, so the
report page, which only needs the specs' JSON, does not import it (issue 23,
item 7: the summary verbs within 2x export's memory). tests/report/
test_vegalite.py checks that every chart's spec equals the one altair writes
for the same calls, on every bundled capture.

Only what the charts use is here: shorthand fields (`"name:Q"`), the channel,
axis, scale, legend and title parameters as keyword arguments, marks,
encodings, layers, filters, scale resolution and legend/title
configuration. In a notebook a chart shows as altair shows it
(`_repr_mimebundle_` converts it to an altair chart: altair is imported there).
"""

from __future__ import annotations

import copy
from typing import Any

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.20.1.json"
# what altair's to_dict adds to every top-level spec
_DEFAULT_VIEW = {"continuousWidth": 300, "continuousHeight": 300}
_TYPES = {"Q": "quantitative", "N": "nominal", "T": "temporal", "O": "ordinal", "G": "geojson"}
# channels whose definitions carry no type (Vega-Lite's secondary channels)
_SECONDARY = {"x2", "y2", "xError2", "yError2", "theta2", "radius2", "latitude2", "longitude2"}


def _value(value: Any) -> Any:
    """A parameter's JSON value (a parameter object's dict, lists item by item)."""
    if isinstance(value, _Params):
        return value.to_dict()
    if isinstance(value, list):
        return [_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _value(item) for key, item in value.items()}
    return value


def _shorthand(text: str) -> dict[str, Any]:
    """"field:T" -> {"field": "field", "type": "temporal"} (a bare name: the field alone)."""
    field, colon, kind = text.rpartition(":")
    if colon and kind in _TYPES:
        return {"field": field, "type": _TYPES[kind]}
    return {"field": text}


class _Params:
    """Keyword parameters that become one JSON object (Axis, Scale, Legend ...)."""

    def __init__(self, **params: Any) -> None:
        self.params = params

    def to_dict(self) -> dict[str, Any]:
        return {key: _value(value) for key, value in self.params.items()}


class Axis(_Params):
    pass


class Scale(_Params):
    pass


class Legend(_Params):
    pass


class Data(_Params):
    pass


class TitleParams(_Params):
    def __init__(self, text: Any, **params: Any) -> None:
        super().__init__(text=text, **params)


class _Channel(_Params):
    """A channel definition: a shorthand field and its parameters."""

    def __init__(self, shorthand: str, **params: Any) -> None:
        super().__init__(**params)
        self.shorthand = shorthand

    def to_dict(self) -> dict[str, Any]:
        return {**_shorthand(self.shorthand), **super().to_dict()}


class X(_Channel):
    pass


class Y(_Channel):
    pass


class Color(_Channel):
    pass


class Shape(_Channel):
    pass


class Tooltip(_Channel):
    pass


def _channel(name: str, value: Any) -> Any:
    if isinstance(value, list):
        return [_channel(name, item) for item in value]
    made = _shorthand(value) if isinstance(value, str) else _value(value)
    if name in _SECONDARY:
        made.pop("type", None)
    return made


class TopLevelMixin:
    """What a chart and a layer of charts share: top-level properties,
    scale resolution, configuration, the dict and its display."""

    def __init__(self) -> None:
        self._properties: dict[str, Any] = {}
        self._resolve: dict[str, Any] = {}
        self._config: dict[str, Any] = {}

    def _copy(self) -> Any:
        return copy.copy(self)._detach()

    def _detach(self) -> Any:
        self._properties = dict(self._properties)
        self._resolve = {key: dict(value) for key, value in self._resolve.items()}
        self._config = {key: dict(value) for key, value in self._config.items()}
        return self

    def properties(self, **properties: Any) -> Any:
        made = self._copy()
        made._properties.update(properties)
        return made

    def resolve_scale(self, **channels: str) -> Any:
        made = self._copy()
        made._resolve.setdefault("scale", {}).update(channels)
        return made

    def configure_legend(self, **params: Any) -> Any:
        made = self._copy()
        made._config.setdefault("legend", {}).update(params)
        return made

    def configure_title(self, **params: Any) -> Any:
        made = self._copy()
        made._config.setdefault("title", {}).update(params)
        return made

    def __add__(self, other: TopLevelMixin) -> LayerChart:
        return LayerChart([self, other])

    def _body(self) -> dict[str, Any]:
        raise NotImplementedError

    def _spec(self) -> dict[str, Any]:
        """The spec without the top-level-only keys ($schema, config)."""
        spec = self._body()
        if self._resolve:
            spec["resolve"] = copy.deepcopy(self._resolve)
        spec.update({key: _value(value) for key, value in self._properties.items()})
        return spec

    def to_dict(self) -> dict[str, Any]:
        """The top-level Vega-Lite spec, as altair's `to_dict` writes it."""
        config: dict[str, Any] = {"view": dict(_DEFAULT_VIEW)}
        config.update({key: _value(value) for key, value in self._config.items()})
        return {"config": config, **self._spec(), "$schema": SCHEMA}

    def to_altair(self) -> Any:
        """The same chart as an altair chart (imports altair)."""
        import altair as alt

        spec = self.to_dict()
        kind = alt.LayerChart if "layer" in spec else alt.Chart
        return kind.from_dict(spec)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.to_altair()._repr_mimebundle_(include, exclude)

    def display(self) -> None:
        """Show the chart in a notebook, as altair's `display` does."""
        self.to_altair().display()


class Chart(TopLevelMixin):
    def __init__(self, data: Data | None = None) -> None:
        super().__init__()
        self._data = data
        self._mark: dict[str, Any] | None = None
        self._encoding: dict[str, Any] = {}
        self._transform: list[dict[str, Any]] = []

    def _detach(self) -> Any:
        super()._detach()
        self._encoding = dict(self._encoding)
        self._transform = list(self._transform)
        return self

    def _marked(self, kind: str, params: dict[str, Any]) -> Chart:
        made = self._copy()
        made._mark = {"type": kind, **params}
        return made

    def mark_bar(self, **params: Any) -> Chart:
        return self._marked("bar", params)

    def mark_point(self, **params: Any) -> Chart:
        return self._marked("point", params)

    def mark_line(self, **params: Any) -> Chart:
        return self._marked("line", params)

    def mark_rule(self, **params: Any) -> Chart:
        return self._marked("rule", params)

    def mark_rect(self, **params: Any) -> Chart:
        return self._marked("rect", params)

    def mark_text(self, **params: Any) -> Chart:
        return self._marked("text", params)

    def mark_area(self, **params: Any) -> Chart:
        return self._marked("area", params)

    def mark_tick(self, **params: Any) -> Chart:
        return self._marked("tick", params)

    def encode(self, **channels: Any) -> Chart:
        made = self._copy()
        made._encoding.update(channels)
        return made

    def transform_filter(self, expression: str) -> Chart:
        made = self._copy()
        made._transform.append({"filter": expression})
        return made

    def _body(self) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if self._data is not None:
            spec["data"] = self._data.to_dict()
        if self._mark is not None:
            spec["mark"] = dict(self._mark)
        if self._encoding:
            spec["encoding"] = {name: _channel(name, value) for name, value in self._encoding.items()}
        if self._transform:
            spec["transform"] = [dict(step) for step in self._transform]
        return spec


class LayerChart(TopLevelMixin):
    def __init__(self, layers: list[TopLevelMixin]) -> None:
        super().__init__()
        self._layers = list(layers)

    def _detach(self) -> Any:
        super()._detach()
        self._layers = list(self._layers)
        return self

    def __add__(self, other: TopLevelMixin) -> LayerChart:
        made = self._copy()
        made._layers.append(other)
        return made

    def _body(self) -> dict[str, Any]:
        return {"layer": [layer._spec() for layer in self._layers]}
