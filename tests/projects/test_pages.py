import pytest

from apps.projects.models import Project
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def test_a_member_sees_their_orgs_projects_only(client_for, member, org, project, other_project):
    response = client_for(member).get("/o/acme/projects/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Vision" in body
    assert "Secret plans" not in body
    assert "New project" in body


def test_the_project_page_has_an_empty_jobs_tab(client_for, member, project):
    response = client_for(member).get("/o/acme/projects/vision/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="jobs-tab"' in body
    assert "No jobs yet." in body


@pytest.mark.parametrize(
    "path",
    [
        "/o/globex/projects/",
        "/o/globex/projects/secret-plans/",
        "/o/globex/projects/new/",
        "/o/globex/settings/",
    ],
)
def test_another_orgs_pages_are_404(client_for, member, other_project, path):
    response = client_for(member).get(path)
    assert response.status_code == 404
    assert "Secret plans" not in response.content.decode()


def test_another_orgs_project_slug_is_404_inside_your_own_org(
    client_for, member, org, other_project
):
    assert client_for(member).get("/o/acme/projects/secret-plans/").status_code == 404


def test_a_viewer_cannot_create_a_project(client_for, viewer, org):
    client = client_for(viewer)
    assert client.get("/o/acme/projects/new/").status_code == 403
    response = client.post("/o/acme/projects/new/", {"name": "Nope"})
    assert response.status_code == 403
    assert not Project.objects.exists()
    assert "New project" not in client.get("/o/acme/projects/").content.decode()


def test_a_member_creates_a_project_with_the_form(client_for, member, org):
    response = client_for(member).post(
        "/o/acme/projects/new/", {"name": "Speech Models", "description": "ASR"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/o/acme/projects/speech-models/"
    project = Project.objects.get()
    assert (project.organization, project.slug, project.created_by) == (
        org,
        "speech-models",
        member,
    )


def test_a_taken_slug_is_an_error_next_to_the_field(client_for, member, project):
    response = client_for(member).post("/o/acme/projects/new/", {"name": "Other", "slug": "vision"})
    assert response.status_code == 200
    assert "A project with this slug already exists." in response.content.decode()
    assert Project.objects.count() == 1


def test_the_switcher_moves_between_your_orgs_only(client_for, member, org, other_org):
    client = client_for(member)
    assert client.post("/orgs/switch/", {"org": "globex"}).status_code == 404
    MembershipFactory(user=member, organization=other_org)
    response = client.post("/orgs/switch/", {"org": "globex"})
    assert response["Location"] == "/o/globex/"
    assert client.get("/")["Location"] == "/o/globex/"


def test_pages_need_a_sign_in(db):
    from django.test import Client

    response = Client().get("/o/acme/projects/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_sign_in_and_out_with_the_form(member):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/")
    token = page.cookies["csrftoken"].value
    response = client.post(
        "/accounts/login/",
        {
            "username": member.username,
            "password": "correct-horse-battery",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert client.get("/", follow=True).request["PATH_INFO"] == "/o/acme/"
    token = client.cookies["csrftoken"].value
    client.post("/accounts/logout/", {"csrfmiddlewaretoken": token})
    assert client.get("/o/acme/projects/").status_code == 302


def test_a_login_form_without_csrf_is_refused(member):
    from django.test import Client

    response = Client(enforce_csrf_checks=True).post(
        "/accounts/login/", {"username": member.username, "password": "correct-horse-battery"}
    )
    assert response.status_code == 403
