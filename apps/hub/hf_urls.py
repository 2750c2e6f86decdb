"""The hub's protocol under `/hf/` (HF_ENDPOINT=<trainyard>/hf), as the Hugging Face client
names its paths. A revision is one path segment (the client quotes it); a file path is the
rest of the URL."""

from django.urls import re_path

from apps.hub import downloads, protocol

KINDS = r"(?P<kinds>models|datasets)"
REPO = r"(?P<namespace>[^/]+)/(?P<name>[^/]+)"
REV = r"(?P<revision>[^/]+)"
API = rf"^api/{KINDS}/{REPO}"

urlpatterns = [
    re_path(r"^api/whoami-v2$", protocol.whoami),
    re_path(r"^api/repos/create$", protocol.create_repo),
    re_path(r"^api/repos/delete$", protocol.delete_repo),
    re_path(r"^api/validate-yaml$", protocol.validate_yaml),
    re_path(rf"{API}$", protocol.repo_info),
    re_path(rf"{API}/revision/{REV}$", protocol.repo_info),
    re_path(rf"{API}/tree/{REV}(?:/(?P<path>.+))?$", protocol.tree),
    re_path(rf"{API}/paths-info/{REV}$", protocol.paths_info),
    re_path(rf"{API}/refs$", protocol.list_refs),
    re_path(rf"{API}/commits/{REV}$", protocol.list_commits),
    re_path(rf"{API}/branch/(?P<branch>[^/]+)$", protocol.branch),
    re_path(rf"{API}/tag/{REV}$", protocol.tag),
    re_path(rf"{API}/preupload/{REV}$", protocol.preupload),
    re_path(rf"{API}/commit/{REV}$", protocol.commit),
    re_path(
        rf"^datasets/{REPO}/resolve/{REV}/(?P<path>.+)$",
        downloads.resolve,
        {"kind": "dataset"},
    ),
    re_path(rf"^{REPO}/resolve/{REV}/(?P<path>.+)$", downloads.resolve),
    re_path(r"^(?P<rest>.*)$", protocol.not_found),
]
