"""`/api/v1/projects/{id}/datasets`: upload, list, read (with a preview of the training text)
and delete a project's datasets, the API twin of the project's Datasets tab.

An upload is either multipart (`file`, `format`, optional `name`) or the raw file as the body
(`Content-Type: application/x-ndjson`, `text/csv` or `application/octet-stream`, with
`?format=&name=&filename=`). Both go through `services.dataset_upload`, the page's own row
checks: a bad file is a 400 naming the row and field, param `file`, and nothing is stored; one
over DATASET_MAX_BYTES is a 413 `payload_too_large`.

Any member of the organization reads; members and above upload and delete (viewers get 403).
Datasets are project data, not compute, so an organization without compute may keep them,
as on the page. Another organization's project or dataset is 404 `not_found`.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.permissions import caller
from apps.core.api import page, page_out, validated
from apps.core.errors import InvalidRequest, PayloadTooLarge
from apps.core.pagination import created_page, parse_page_request
from apps.core.serializers import StrictSerializer
from apps.finetunes import raw_upload, services
from apps.finetunes.models import Dataset
from apps.projects.models import Project
from trainer.formats import FORMATS

# What a multipart body may carry around its file.
MULTIPART_OVERHEAD_BYTES = 1024 * 1024


class DatasetOut(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id")
    format = serializers.CharField(source="dataset_format")
    filename = serializers.SerializerMethodField()
    project = serializers.CharField(source="project.public_id")

    class Meta:
        model = Dataset
        fields = [
            "id",
            "name",
            "format",
            "filename",
            "rows",
            "size_bytes",
            "sha256",
            "created_at",
            "project",
        ]

    def get_filename(self, dataset: Dataset) -> str:
        return dataset.file.name.rsplit("/", 1)[-1]


class PreviewRowOut(serializers.Serializer):
    row = serializers.IntegerField()
    prompt = serializers.CharField()
    completion = serializers.CharField()


class DatasetDetailOut(DatasetOut):
    preview = PreviewRowOut(many=True, read_only=True)
    preview_error = serializers.CharField(allow_null=True, read_only=True)

    class Meta(DatasetOut.Meta):
        fields = [*DatasetOut.Meta.fields, "preview", "preview_error"]


DatasetPage = page_out(DatasetOut, "DatasetPage")


@extend_schema_field(OpenApiTypes.BINARY)
class UploadField(serializers.FileField):
    """A file part of a multipart body: binary in the schema (DRF's FileField reads as a URL
    there, as it is in responses), so clients and the fuzzer send a file."""


class DatasetFieldsIn(StrictSerializer):
    """The upload's fields besides the file: the form fields of a multipart body, the query
    of a raw one."""

    format = serializers.ChoiceField(
        choices=list(FORMATS), help_text="How the rows are checked and later trained."
    )
    name = serializers.CharField(
        max_length=200, required=False, help_text="Defaults to the file's name."
    )


class DatasetMultipartIn(DatasetFieldsIn):
    file = UploadField(help_text="The dataset: a .jsonl or .csv file.")


class DatasetRawQueryIn(DatasetFieldsIn):
    filename = serializers.CharField(
        max_length=255,
        required=False,
        help_text="Must end in .jsonl or .csv; defaults by content type.",
    )


_RAW_PARAMS = [
    OpenApiParameter("format", OpenApiTypes.STR, enum=list(FORMATS), description="raw body only"),
    OpenApiParameter("name", OpenApiTypes.STR, description="raw body only"),
    OpenApiParameter("filename", OpenApiTypes.STR, description="raw body only"),
]
_PAGE_PARAMS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 500, default 50"),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the previous page"),
]


def _project(request, project_id: str) -> Project:
    return get_object_or_404(
        Project.objects.for_org(caller(request).organization), public_id=project_id
    )


def _dataset(request, project_id: str, dataset_id: str) -> Dataset:
    return get_object_or_404(
        Dataset.objects.filter(project=_project(request, project_id)).select_related("project"),
        public_id=dataset_id,
    )


def _stem(filename: str) -> str:
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return (base.rsplit(".", 1)[0] if "." in base else base).strip()[:200] or "dataset"


class DatasetCollectionView(APIView):
    # Multipart is parsed by DRF; a raw body is read by `raw_upload` as a stream.
    parser_classes = [MultiPartParser]

    @extend_schema(
        request={
            "multipart/form-data": DatasetMultipartIn,
            "application/x-ndjson": OpenApiTypes.BINARY,
            "text/csv": OpenApiTypes.BINARY,
            "application/octet-stream": OpenApiTypes.BINARY,
        },
        parameters=_RAW_PARAMS,
        responses={201: DatasetOut},
        summary="Upload a dataset (every row checked before it is stored)",
        operation_id="projects_datasets_create",
    )
    def post(self, request, project_id: str):
        project = _project(request, project_id)
        kind = raw_upload.media_type(request)
        if kind == "multipart/form-data":
            upload, fields = self._multipart(request)
        elif kind in raw_upload.RAW_SUFFIXES:
            upload, fields = self._raw(request, kind)
        else:
            raise exceptions.UnsupportedMediaType(
                kind,
                "Send the dataset as multipart/form-data (file, format, name) or as the body "
                f"with Content-Type {', '.join(sorted(raw_upload.RAW_SUFFIXES))}.",
            )
        try:
            dataset = services.dataset_upload(
                project=project,
                name=fields.get("name") or _stem(upload.name or ""),
                upload=upload,
                dataset_format=fields["format"],
                uploaded_by=caller(request).user,
            )
        except services.DatasetTooLarge as error:
            raise PayloadTooLarge(f"The dataset {error}.", param="file") from None
        except services.DatasetInvalid as error:
            raise InvalidRequest(str(error), param="file") from None
        finally:
            upload.close()
        return Response(DatasetOut(dataset).data, status=status.HTTP_201_CREATED)

    def _multipart(self, request):
        announced = raw_upload.announced_length(request)
        if (
            announced is not None
            and announced > services.dataset_max_bytes() + MULTIPART_OVERHEAD_BYTES
        ):
            raise raw_upload.too_large(announced)
        fields = validated(DatasetMultipartIn, request.data)
        return fields["file"], fields

    def _raw(self, request, kind: str):
        fields = validated(DatasetRawQueryIn, request.query_params)
        filename = fields.get("filename") or services.clean_filename(
            (fields.get("name") or "dataset") + raw_upload.RAW_SUFFIXES[kind]
        )
        return raw_upload.body_upload(request._request, filename=filename), fields

    @extend_schema(
        responses=DatasetPage,
        parameters=_PAGE_PARAMS,
        summary="List a project's datasets, newest first",
        operation_id="projects_datasets_list",
    )
    def get(self, request, project_id: str):
        project = _project(request, project_id)
        page_request = parse_page_request(request.query_params, key_length=2, default_order="desc")
        datasets = Dataset.objects.filter(project=project)
        rows, next_cursor = created_page(datasets.select_related("project"), page_request)
        return page(rows, DatasetOut, next_cursor=next_cursor, total=datasets.count())


class DatasetDetailView(APIView):
    @extend_schema(
        responses=DatasetDetailOut,
        summary="Get a dataset and its first rows as training text",
        operation_id="projects_datasets_get",
    )
    def get(self, request, project_id: str, dataset_id: str):
        dataset = _dataset(request, project_id, dataset_id)
        try:
            preview, preview_error = services.dataset_preview(dataset), None
        except (OSError, ValueError, services.DataError) as error:  # the file moved or changed
            preview, preview_error = [], str(error)
        dataset.preview = preview
        dataset.preview_error = preview_error
        return Response(DatasetDetailOut(dataset).data)

    @extend_schema(
        responses={204: None},
        summary="Delete a dataset and its file (409 dataset_in_use while a job uses it)",
        operation_id="projects_datasets_delete",
    )
    def delete(self, request, project_id: str, dataset_id: str):
        services.dataset_delete(_dataset(request, project_id, dataset_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
