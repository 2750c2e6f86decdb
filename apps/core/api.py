"""The one API idiom every app's endpoints follow.

- Input: `validated(SomeIn, request.data)` gives the validated body as a dict, or raises
  `InvalidRequest` whose `param` names the first bad field (`compute.gpu_count`; a list's
  item by its index, `thresholds.0`).
- Output: every operation renders through an `…Out` serializer, and that serializer is also its
  `extend_schema` response, so the OpenAPI schema describes every body the API sends.
- Lists: `page(rows, SomeOut, next_cursor=…, total=…)` answers the one list shape,
  `{"data": [...], "next_cursor": ..., "total": ...}`, described in the schema by
  `page_out(SomeOut, "SomePage")`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.response import Response

from apps.core.api_errors import first_validation_error
from apps.core.errors import InvalidRequest


def validated(
    serializer_class: type[serializers.Serializer],
    data: object,
    *,
    partial: bool = False,
    **context,
) -> dict:
    """The validated body, or InvalidRequest naming the first bad field (`param="a.b.0"`).
    A body that is not an object (a JSON list, a string) is InvalidRequest with no param.
    `partial`: only the fields sent are validated (a PATCH)."""
    serializer = serializer_class(data=data, partial=partial, context=context)
    if not serializer.is_valid():
        param, message = first_validation_error(serializer.errors)
        raise InvalidRequest(message, param=param)
    return dict(serializer.validated_data)


def page_body(
    rows: Iterable[Any],
    out: type[serializers.BaseSerializer],
    *,
    next_cursor: str | None,
    total: int,
    head: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict:
    """The one list shape as a dict; `head` holds the keys a list carries before `data`
    (serving's `"object": "list"`, metrics' `names`)."""
    return {
        **(head or {}),
        "data": out(rows, many=True, context=dict(context or {})).data,
        "next_cursor": next_cursor,
        "total": total,
    }


def page(
    rows: Iterable[Any],
    out: type[serializers.BaseSerializer],
    *,
    next_cursor: str | None,
    total: int,
    head: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
) -> Response:
    """The one list shape: {"data": [...], "next_cursor": ..., "total": ...}."""
    return Response(
        page_body(rows, out, next_cursor=next_cursor, total=total, head=head, context=context)
    )


def page_out(
    out: type[serializers.BaseSerializer],
    name: str,
    *,
    doc: str | None = None,
    **head: serializers.Field,
) -> type[serializers.Serializer]:
    """The schema of `page(rows, out, ...)`: a serializer class named `name` (its component
    name in the OpenAPI schema; `doc` its description), with `head`'s fields before `data`."""
    fields: dict[str, Any] = {
        **head,
        "data": out(many=True),
        "next_cursor": serializers.CharField(allow_null=True),
        "total": serializers.IntegerField(),
    }
    namespace = {**fields, "__module__": out.__module__, "__doc__": doc}
    return type(name, (serializers.Serializer,), namespace)
