"""`GET /api/v1/compute/jobs/schema`: the JSON Schema of a job file (`trainyard apply -f`),
for editors to validate against (`# yaml-language-server: $schema=<url>`).

A job file is the request body of its kind's create endpoint plus `kind:` (a container job's
may leave it out) and, for a kind created inside a project (a fine-tune), `project:` (an id or
a name; the CLI resolves it). The schema is cut from the API's own OpenAPI document, so the
file and the API cannot disagree: the same serializers describe both, and the server
validates every file with them. Two changes make it plain JSON Schema (2020-12): OpenAPI's
`nullable` becomes a `null` type, and a decimal (sent as a string by the API's own clients)
may also be a YAML number. Every object is closed (`additionalProperties: false`), as the
strict serializers are, so an editor flags a typo as the server would.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.permissions import IsOrgMember
from apps.jobs import kinds

REF_PREFIX = "#/components/schemas/"
DEFS_PREFIX = "#/$defs/"
# The fields a kind created inside a project takes from its URL, given in the file instead.
PROJECT_FIELD = {
    "type": "string",
    "description": "The project: its id (`proj_…`) or its name or slug.",
}


JobFileSchemaOut = inline_serializer(
    name="JobFileSchema",
    fields={
        "$schema": serializers.CharField(help_text="The JSON Schema dialect (2020-12)"),
        "title": serializers.CharField(),
        "description": serializers.CharField(),
        "oneOf": serializers.ListField(
            child=serializers.DictField(), help_text="One schema per kind of job"
        ),
        "$defs": serializers.DictField(help_text="The schemas the kinds' schemas refer to"),
    },
)


class JobFileSchemaView(APIView):
    # Documentation of a body: any member may read it, with or without compute enabled.
    permission_classes = [IsOrgMember]

    @extend_schema(
        responses={200: JobFileSchemaOut},
        summary="The JSON Schema of a job file (trainyard apply -f)",
        operation_id="compute_jobs_schema",
    )
    def get(self, request):
        return Response(job_file_schema())


@cache
def job_file_schema() -> dict[str, Any]:
    """The schema, built once per process from the OpenAPI document."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    components = document["components"]["schemas"]
    operations = {
        operation["operationId"]: operation
        for path in document["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    container_body = _body_schema(operations[kinds.CONTAINER_CREATE_OPERATION], components)
    variants = []
    for kind, operation_id in kinds.job_file_kinds().items():
        operation = operations[operation_id]
        body = _body_schema(operation, components)
        variant = _variant(kind, body, container_body)
        variant["description"] = (
            f"{operation.get('summary', kind)}: the body of its endpoint, with `kind: {kind}`."
        )
        variants.append(variant)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Trainyard job file",
        "description": "A job for `trainyard apply -f`: a container job (`kind: container`, "
        "the default) or a fine-tune (`kind: finetune`, with its `project`).",
        "oneOf": variants,
    }
    schema["$defs"] = {
        name: _plain(copy.deepcopy(components[name]))
        for name in sorted(_referenced(variants, components))
    }
    return _plain(schema)


def _body_schema(operation: dict, components: dict) -> dict:
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return copy.deepcopy(components[ref.removeprefix(REF_PREFIX)])


def _variant(kind: str, body: dict, container_body: dict) -> dict:
    """One kind's file: its body, less what the CLI fills in (`job_file`), plus `kind`."""
    properties = {"kind": {"const": kind}}
    properties.update(body["properties"])
    properties.pop("job_file", None)
    required = [name for name in body.get("required", []) if name != "job_file"]
    if kind == kinds.CONTAINER_KIND:
        properties["project"] = dict(PROJECT_FIELD)
    else:
        required = ["kind", *required]
        if "project" not in properties:
            properties["project"] = dict(PROJECT_FIELD)
            required.append("project")
        # A fine-tune body takes `compute` and `limits` as free-form objects and hands them
        # to the job underneath, which validates them as a container job's: say so here.
        for name in ("compute", "limits"):
            if name in properties and name in container_body["properties"]:
                properties[name] = container_body["properties"][name]
    return {
        "type": "object",
        "title": f"{kind} job",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _referenced(node: Any, components: dict, found: set[str] | None = None) -> set[str]:
    """The names of every component `node` refers to, directly or through others."""
    found = set() if found is None else found
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            name = ref.removeprefix(REF_PREFIX)
            if name not in found:
                found.add(name)
                _referenced(components[name], components, found)
        for value in node.values():
            _referenced(value, components, found)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, components, found)
    return found


def _plain(node: Any) -> Any:
    """OpenAPI 3.0's dialect to JSON Schema's, in place: `$ref`s into `$defs`, decimals that
    may be numbers, `nullable` as a null type, input objects closed."""
    if isinstance(node, list):
        return [_plain(value) for value in node]
    if not isinstance(node, dict):
        return node
    for key, value in list(node.items()):
        node[key] = _plain(value)
    if isinstance(node.get("$ref"), str):
        node["$ref"] = node["$ref"].replace(REF_PREFIX, DEFS_PREFIX)
    if node.get("format") == "decimal" and node.get("type") == "string":
        node["type"] = ["number", "string"]
    if node.pop("nullable", False):
        if "type" in node:
            types = node["type"] if isinstance(node["type"], list) else [node["type"]]
            node["type"] = [*types, "null"]
        else:
            rest = {key: node.pop(key) for key in list(node) if key not in ("description",)}
            node["anyOf"] = [rest, {"type": "null"}]
    if node.get("type") == "object" and "properties" in node:
        node.setdefault("additionalProperties", False)
    return node
