"""`/api/v1/compute/workdirs`: upload (POST), list (GET, newest first, paged like the other
lists) and, by id, get and delete the organization's code archives (tar.gz or zip) for jobs'
`container.workdir`. Another organization's archive is 404 `not_found`; deleting one that a
job which has not ended names is 409 `workdir_in_use` (its next attempt downloads it); an
archive past the organization's storage quota is 413 `quota_exceeded`.

The archive comes as multipart (`file`) or as the raw body (`application/gzip`,
`application/zip` or `application/octet-stream`). A body announced over WORKDIR_MAX_BYTES
is refused before it is read; config/body_limits.py lets an authenticated caller send that
much on this path (REQUEST_MAX_BYTES elsewhere).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import parsers, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import storage
from apps.accounts.permissions import COMPUTE_PERMISSIONS, caller
from apps.core.api import page, page_out
from apps.core.errors import InvalidRequest
from apps.core.pagination import created_page, parse_page_request
from apps.workdirs import selectors, store
from apps.workdirs.models import Workdir

# Room for the multipart envelope around the file.
FORM_OVERHEAD_BYTES = 1024 * 1024


class WorkdirOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")
    format = serializers.CharField(source="archive_format")

    class Meta:
        model = Workdir
        fields = ["id", "size_bytes", "sha256", "format", "created_at"]


WorkdirPage = page_out(WorkdirOut, "WorkdirPage")


_PAGE_PARAMS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the previous page"),
]


class _RawArchiveParser(parsers.BaseParser):
    """Hands the view the request stream itself as `file`: nothing is read here."""

    def parse(self, stream, media_type=None, parser_context=None):
        return parsers.DataAndFiles({}, {"file": stream} if stream is not None else {})


class GzipParser(_RawArchiveParser):
    media_type = "application/gzip"


class XGzipParser(_RawArchiveParser):
    media_type = "application/x-gzip"


class ZipParser(_RawArchiveParser):
    media_type = "application/zip"


class OctetStreamParser(_RawArchiveParser):
    media_type = "application/octet-stream"


def _announced_length(request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


class WorkdirCollectionView(APIView):
    permission_classes = COMPUTE_PERMISSIONS
    parser_classes = [
        parsers.MultiPartParser,
        GzipParser,
        XGzipParser,
        ZipParser,
        OctetStreamParser,
    ]

    @extend_schema(
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
                "required": ["file"],
            },
            "application/gzip": OpenApiTypes.BINARY,
            "application/zip": OpenApiTypes.BINARY,
            "application/octet-stream": OpenApiTypes.BINARY,
        },
        responses={201: WorkdirOut},
        summary="Upload a code archive for container.workdir",
        operation_id="compute_workdirs_create",
    )
    def post(self, request):
        who = caller(request)
        multipart = request.content_type.startswith("multipart/")
        limit = store.max_bytes() + (FORM_OVERHEAD_BYTES if multipart else 0)
        announced = _announced_length(request)
        if announced is not None and announced > limit:
            raise store.too_large(announced)
        if announced is not None:  # a doomed upload is not read (the envelope not counted)
            size = max(announced - (FORM_OVERHEAD_BYTES if multipart else 0), 0)
            storage.check_room(who.organization, size, what="archive", param=store.PARAM)
        upload = request.FILES.get("file")
        if upload is None:
            raise InvalidRequest(
                "Send the archive as multipart field 'file' or as the raw body "
                "(Content-Type application/gzip, application/zip or application/octet-stream).",
                param="file",
            )
        workdir = store.workdir_create(
            organization=who.organization,
            source=upload,
            created_by=who.user,
            created_by_key=who.api_key,
        )
        return Response(WorkdirOut(workdir).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses=WorkdirPage,
        parameters=_PAGE_PARAMS,
        summary="List the organization's code archives, newest first",
        operation_id="compute_workdirs_list",
    )
    def get(self, request):
        page_request = parse_page_request(request.query_params, key_length=2, default_order="desc")
        workdirs = Workdir.objects.for_org(caller(request).organization)
        rows, next_cursor = created_page(workdirs, page_request)
        return page(rows, WorkdirOut, next_cursor=next_cursor, total=workdirs.count())


class WorkdirDetailView(APIView):
    permission_classes = COMPUTE_PERMISSIONS

    @extend_schema(
        responses=WorkdirOut, summary="Get a code archive", operation_id="compute_workdirs_get"
    )
    def get(self, request, workdir_id: str):
        workdir = selectors.workdir_for_org(caller(request).organization, workdir_id)
        return Response(WorkdirOut(workdir).data)

    @extend_schema(
        responses={204: None},
        summary="Delete a code archive (409 workdir_in_use while an unfinished job names it)",
        operation_id="compute_workdirs_delete",
    )
    def delete(self, request, workdir_id: str):
        store.workdir_delete(selectors.workdir_for_org(caller(request).organization, workdir_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
