from django.urls import re_path

from apps.hub import pages

SECTION = r"(?P<section>models|datasets)"
REV = r"(?P<revision>[^/]+)"

urlpatterns = [
    re_path(rf"^o/(?P<org_slug>[-\w]+)/{SECTION}/$", pages.repo_list, name="hub-list"),
    re_path(
        rf"^o/(?P<org_slug>[-\w]+)/{SECTION}/(?P<name>[^/]+)/$",
        pages.repo_detail,
        name="hub-repo",
    ),
    re_path(
        rf"^o/(?P<org_slug>[-\w]+)/{SECTION}/(?P<name>[^/]+)/resolve/{REV}/(?P<path>.+)$",
        pages.file_download,
        name="hub-file",
    ),
]
